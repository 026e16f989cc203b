package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/gangway/gangway/internal/api"
)

// readArchived finds job id in the job archive at path (JSON lines of
// api.JobDetail, appended by retention). A job written again after it was
// archived is archived again later, so the last record wins. It returns
// (nil, nil) when the archive does not hold the job or does not exist yet.
//
// The scan is linear: a describe of a long-gone job is rare, and a
// substring test skips almost every line without decoding it.
func readArchived(path, id string) (*api.JobDetail, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("job archive: %w", err)
	}
	defer f.Close()
	needle := []byte(`"id":` + jsonString(id))
	r := bufio.NewReaderSize(f, 1<<20)
	var found *api.JobDetail
	for line := 1; ; line++ {
		b, err := readArchiveLine(r)
		if len(b) > 0 && bytes.Contains(b, needle) {
			var d api.JobDetail
			if derr := json.Unmarshal(b, &d); derr != nil {
				if err == nil { // a torn last line is no error: it is being written
					return nil, fmt.Errorf("job archive %s line %d: %w", path, line, derr)
				}
			} else if d.Job.ID == id {
				found = &d
			}
		}
		if errors.Is(err, io.EOF) {
			return found, nil
		}
		if err != nil {
			return nil, fmt.Errorf("job archive %s: %w", path, err)
		}
	}
}

// readArchiveLine reads one line of any length (a large gang's record is
// hundreds of kilobytes).
func readArchiveLine(r *bufio.Reader) ([]byte, error) {
	b, err := r.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		return b, err
	}
	buf := append([]byte(nil), b...)
	for errors.Is(err, bufio.ErrBufferFull) {
		b, err = r.ReadSlice('\n')
		buf = append(buf, b...)
	}
	return buf, err
}

func jsonString(s string) string {
	b, _ := json.Marshal(s) // a string: cannot fail
	return string(b)
}
