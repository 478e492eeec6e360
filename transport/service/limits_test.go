package service

import "testing"

// A body over a limit names the limit once when its bytes say it best,
// and in the larger unit too when that reads better.
func TestCheckBodySizeNamesTheLimit(t *testing.T) {
	for _, c := range []struct {
		limit int
		want  string
	}{
		{10, "body: 11 bytes is over the limit of 10 bytes"},
		{1, "body: 11 bytes is over the limit of 1 byte"},
		{1 << 20, ""},
	} {
		err := CheckBodySize("body", make([]byte, 11), Limits{MaxBodyBytes: c.limit})
		if c.want == "" {
			if err != nil {
				t.Errorf("limit %d: %v", c.limit, err)
			}
			continue
		}
		if err == nil || err.Error() != c.want {
			t.Errorf("limit %d: %v; want %q", c.limit, err, c.want)
		}
	}
	big := CheckBodySize("body", make([]byte, 1<<20+1), Limits{MaxBodyBytes: 1 << 20})
	if want := "body: 1048577 bytes is over the limit of 1048576 bytes (1 MiB)"; big == nil || big.Error() != want {
		t.Errorf("limit 1 MiB: %v; want %q", big, want)
	}
}
