package procstat

import "testing"

// A figure is only as right as the parsing of /proc and the sums of the
// backends' readings; these check both on fixed inputs.
func TestParse(t *testing.T) {
	// pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt
	// majflt cmajflt utime stime cutime cstime priority nice threads
	// itrealvalue starttime …
	for _, tc := range []struct {
		name string
		line string
		want Stat
		ok   bool
	}{
		{"command with spaces and parentheses", "4242 (post (gres) x) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 50 30 20 20 0 1 0 123456 1000 10 …",
			Stat{Comm: "post (gres) x", PPID: 17, CPU: 3.0, Children: 0.5, StartedAt: 1234.56}, true},
		{"truncated", "4242 (short) S 1 2", Stat{}, false},
		{"no command", "4242 S 1 2", Stat{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, ok := Parse(tc.line)
			if ok != tc.ok || st != tc.want {
				t.Fatalf("got %+v, %v; want %+v, %v", st, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestCPUSince(t *testing.T) {
	a := Backends{Uptime: 500, ByPID: map[int]Stat{100: {CPU: 2, StartedAt: 50}, 101: {CPU: 7, StartedAt: 60}, 102: {CPU: 1, StartedAt: 70}}}
	for _, tc := range []struct {
		name string
		b    Backends
		want float64
	}{
		{"the same backend counts its growth", Backends{ByPID: map[int]Stat{100: {CPU: 3, StartedAt: 50}}}, 1},
		{"a reused pid is a new backend, counted whole", Backends{ByPID: map[int]Stat{101: {CPU: 4, StartedAt: 510}}}, 4},
		{"a new backend counts whole", Backends{ByPID: map[int]Stat{103: {CPU: 0.5, StartedAt: 505}}}, 0.5},
		{"one unseen at the start though older is not counted", Backends{ByPID: map[int]Stat{104: {CPU: 9, StartedAt: 100}}}, 0},
		{"one that ended is missed", Backends{ByPID: map[int]Stat{}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.b.CPUSince(a); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}
