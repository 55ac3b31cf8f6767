package envelope

import "time"

// ParseStoredTimestamp parses b when it is a time in exactly the form a
// Timestamp encodes, 2006-01-02T15:04:05.000Z (UTC, three fractional
// digits: every occurred_at the store writes), without allocating; ok is
// false for any other text, which the caller parses with ParseTimestamp.
// For every text it accepts, the result is ParseTimestamp's (it accepts
// nothing ParseTimestamp refuses).
func ParseStoredTimestamp(b []byte) (ts Timestamp, ok bool) {
	if len(b) != len(timestampLayout) || b[4] != '-' || b[7] != '-' || b[10] != 'T' ||
		b[13] != ':' || b[16] != ':' || b[19] != '.' || b[23] != 'Z' {
		return Timestamp{}, false
	}
	var f [7]int // year, month, day, hour, minute, second, millisecond
	for i, at := range [...][2]int{{0, 4}, {5, 2}, {8, 2}, {11, 2}, {14, 2}, {17, 2}, {20, 3}} {
		for _, c := range b[at[0] : at[0]+at[1]] {
			if c < '0' || c > '9' {
				return Timestamp{}, false
			}
			f[i] = f[i]*10 + int(c-'0')
		}
	}
	if f[0] < 1 {
		return Timestamp{}, false // year 0000: ParseTimestamp refuses it
	}
	t := time.Date(f[0], time.Month(f[1]), f[2], f[3], f[4], f[5], f[6]*int(time.Millisecond), time.UTC)
	// time.Date normalises what time.Parse refuses (February 30, hour
	// 24, second 60): only a time that comes back as written is taken.
	if t.Year() != f[0] || int(t.Month()) != f[1] || t.Day() != f[2] || t.Hour() != f[3] || t.Minute() != f[4] || t.Second() != f[5] {
		return Timestamp{}, false
	}
	return NewTimestamp(t), true
}
