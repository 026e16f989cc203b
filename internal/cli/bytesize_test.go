package cli

import "testing"

func TestByteSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  bool
	}{
		{in: "0", want: 0},
		{in: "1073741824", want: 1 << 30},
		{in: "512M", want: 512 << 20},
		{in: "1G", want: 1 << 30},
		{in: "1GiB", want: 1 << 30},
		{in: "2TB", want: 2 << 40},
		{in: "8K", want: 8 << 10},
		{in: "", err: true},
		{in: "G", err: true},
		{in: "-1G", err: true},
		{in: "1.5G", want: 3 << 29},
		{in: "1X", err: true},
		{in: "9000000T", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var b byteSize
			err := b.Set(tt.in)
			if (err != nil) != tt.err || int64(b) != tt.want {
				t.Errorf("Set(%q) = %d, %v; want %d, error %v", tt.in, b, err, tt.want, tt.err)
			}
		})
	}
}
