package cli

import (
	"strconv"

	"github.com/gangway/gangway/internal/api"
)

// byteSize is a flag of bytes written plainly or with a 1024-based
// suffix: "1073741824", "512M", "1G", "1GiB", "1.5G" (api.ParseByteSize).
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Set(s string) error {
	v, err := api.ParseByteSize(s)
	if err != nil {
		return err
	}
	*b = byteSize(v)
	return nil
}
