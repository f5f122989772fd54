package service

import (
	"testing"
	"time"
)

// TestLogWindow: the one reading of logs' tail, since and until that the
// CLI and the Engine API share, as dockerd reads them.
func TestLogWindow(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for _, c := range []struct {
		tail, since, until string
		wantTail           int
		wantSince, wantEnd time.Time
	}{
		{"", "", "", -1, time.Time{}, time.Time{}},
		{"all", "0", "0", -1, time.Time{}, time.Time{}},
		{"3", "", "", 3, time.Time{}, time.Time{}},
		{"0", "", "", 0, time.Time{}, time.Time{}},
		{"-1", "", "", -1, time.Time{}, time.Time{}}, // dockerd: every line
		{"-7", "", "", -1, time.Time{}, time.Time{}},
		{"", "10m", "1m", -1, now.Add(-10 * time.Minute), now.Add(-time.Minute)},
		// What the docker CLI sends: Unix seconds with nine digits.
		{"", "1699999000.000000001", "1699999999.5", -1, time.Unix(1699999000, 1), time.Unix(1699999999, 5e8)},
		{"", "1699999000", "", -1, time.Unix(1699999000, 0), time.Time{}},
		{"", "2023-11-14T22:13:20Z", "", -1, now, time.Time{}},
	} {
		o, err := LogWindow(c.tail, c.since, c.until, now)
		if err != nil {
			t.Errorf("LogWindow(%q, %q, %q): %v", c.tail, c.since, c.until, err)
			continue
		}
		if o.Tail != c.wantTail || !o.Since.Equal(c.wantSince) || !o.Until.Equal(c.wantEnd) {
			t.Errorf("LogWindow(%q, %q, %q) = tail %d since %v until %v, want %d %v %v", c.tail, c.since, c.until, o.Tail, o.Since, o.Until, c.wantTail, c.wantSince, c.wantEnd)
		}
	}
	for _, bad := range [][3]string{{"ten", "", ""}, {"", "yesterday", ""}, {"", "", "1.2.3"}} {
		if _, err := LogWindow(bad[0], bad[1], bad[2], now); err == nil {
			t.Errorf("LogWindow(%q) was taken", bad)
		}
	}
}
