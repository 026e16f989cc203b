package cli

import (
	"fmt"
	"strconv"
	"strings"
)

// byteSize is a flag of bytes written plainly or with a 1024-based
// suffix: "1073741824", "512M", "1G", "1GiB".
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Set(s string) error {
	num := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSpace(s), "B"), "i")
	shift := 0
	if n := len(num); n > 0 {
		if i := strings.IndexByte("KMGT", num[n-1]); i >= 0 {
			shift, num = 10*(i+1), num[:n-1]
		}
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v < 0 || v > (1<<63-1)>>shift {
		return fmt.Errorf("%q: want a number of bytes, optionally with K, M, G or T (1024-based), such as 1G", s)
	}
	*b = byteSize(v << shift)
	return nil
}
