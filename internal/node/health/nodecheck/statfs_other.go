//go:build !linux

package nodecheck

import "errors"

func freeBytes(string) (int64, error) { return 0, errors.ErrUnsupported }
