package store

import (
	"strings"
	"testing"
)

func TestCheckInitialCluster(t *testing.T) {
	const me = "https://10.0.0.1:2380"
	for _, c := range []struct{ list, want string }{
		{"s1=https://10.0.0.1:2380,s2=https://10.0.0.2:2380,s3=https://10.0.0.3:2380", ""},
		{"s1=https://10.0.0.1:2380", ""},
		{"s1=https://10.0.0.1:2380,s2=https://10.0.0.2:2380", "use an odd number"},
		{"s2=https://10.0.0.2:2380,s3=https://10.0.0.3:2380,s4=https://10.0.0.4:2380", "does not name this member"},
		{"s1=https://10.0.0.9:2380,s2=https://10.0.0.2:2380,s3=https://10.0.0.3:2380", "--etcd-peer-addr makes it https://10.0.0.1:2380"},
		{"s1=http://10.0.0.1:2380,s2=https://10.0.0.2:2380,s3=https://10.0.0.3:2380", "want https://host:port"},
		{"s1=https://10.0.0.1:2380,s1=https://10.0.0.2:2380,s3=https://10.0.0.3:2380", "twice"},
		{"s1=https://10.0.0.1:2380,oops", `"oops" is not name=https://host:port`},
	} {
		err := checkInitialCluster(c.list, "s1", me)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.list, err, c.want)
		}
	}
}
