package esserver

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

func parseISO(s string, strict bool) (time.Time, error) {
	bad := func() (time.Time, error) { return time.Time{}, fmt.Errorf("failed to parse date [%s]", s) }
	p := 0
	num := func(min, max int) (int, bool) {
		start := p
		n := 0
		for p < len(s) && p-start < max && s[p] >= '0' && s[p] <= '9' {
			n = n*10 + int(s[p]-'0')
			p++
		}
		return n, p-start >= min
	}
	neg := false
	if !strict && p < len(s) && (s[p] == '-' || s[p] == '+') {
		neg = s[p] == '-'
		p++
	}
	minDigits := 1
	if strict {
		minDigits = 2
	}
	maxYear := 9
	if strict {
		maxYear = 4
	}
	year, ok := num(4, maxYear)
	if !ok {
		return bad()
	}
	if neg {
		year = -year
	}
	mon, day, hh, mm, ss, nanos := 1, 1, 0, 0, 0, 0
	loc := time.UTC
	if p < len(s) && s[p] == '-' {
		p++
		if mon, ok = num(minDigits, 2); !ok {
			return bad()
		}
		if p < len(s) && s[p] == '-' {
			p++
			if day, ok = num(minDigits, 2); !ok {
				return bad()
			}
			if p < len(s) && (s[p] == 'T' || (!strict && s[p] == ' ')) {
				p++
				if hh, ok = num(minDigits, 2); !ok {
					return bad()
				}
				if p < len(s) && s[p] == ':' {
					p++
					if mm, ok = num(minDigits, 2); !ok {
						return bad()
					}
					if p < len(s) && s[p] == ':' {
						p++
						if ss, ok = num(minDigits, 2); !ok {
							return bad()
						}
						if p < len(s) && (s[p] == '.' || s[p] == ',') {
							p++
							start := p
							frac, ok := num(1, 9)
							if !ok {
								return bad()
							}
							for d := p - start; d < 9; d++ {
								frac *= 10
							}
							nanos = frac
						}
					}
				}
			}
		}
	}
	if p < len(s) {
		z := s[p:]
		switch {
		case z == "Z":
		case len(z) >= 3 && (z[0] == '+' || z[0] == '-'):
			sign := 1
			if z[0] == '-' {
				sign = -1
			}
			rest := strings.ReplaceAll(z[1:], ":", "")
			if len(rest) != 2 && len(rest) != 4 {
				return bad()
			}
			h, err1 := strconv.Atoi(rest[:2])
			mi := 0
			var err2 error
			if len(rest) == 4 {
				mi, err2 = strconv.Atoi(rest[2:])
			}
			if err1 != nil || err2 != nil {
				return bad()
			}
			loc = time.FixedZone("", sign*(h*3600+mi*60))
		default:
			return bad()
		}
	}
	if mon < 1 || mon > 12 || day < 1 || day > 31 || hh > 23 || mm > 59 || ss > 59 {
		return bad()
	}
	t := time.Date(year, time.Month(mon), day, hh, mm, ss, nanos, loc)
	if t.Day() != day {
		return bad()
	}
	return t.UTC(), nil
}

// javaLayout converts a Java DateTimeFormatter pattern to a Go layout.
func javaLayout(p string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(p); {
		c := p[i]
		if c == '\'' {
			j := strings.IndexByte(p[i+1:], '\'')
			if j < 0 {
				return "", false
			}
			b.WriteString(p[i+1 : i+1+j])
			i += j + 2
			continue
		}
		j := i
		for j < len(p) && p[j] == c {
			j++
		}
		n := j - i
		switch c {
		case 'y', 'u', 'Y':
			if n == 2 {
				b.WriteString("06")
			} else {
				b.WriteString("2006")
			}
		case 'M', 'L':
			switch n {
			case 1:
				b.WriteString("1")
			case 2:
				b.WriteString("01")
			case 3:
				b.WriteString("Jan")
			default:
				b.WriteString("January")
			}
		case 'd':
			if n == 1 {
				b.WriteString("2")
			} else {
				b.WriteString("02")
			}
		case 'D':
			b.WriteString("002")
		case 'H', 'k':
			b.WriteString("15")
		case 'h', 'K':
			if n == 1 {
				b.WriteString("3")
			} else {
				b.WriteString("03")
			}
		case 'm':
			if n == 1 {
				b.WriteString("4")
			} else {
				b.WriteString("04")
			}
		case 's':
			if n == 1 {
				b.WriteString("5")
			} else {
				b.WriteString("05")
			}
		case 'S', 'n':
			cur := b.String()
			if !strings.HasSuffix(cur, ".") && !strings.HasSuffix(cur, ",") {
				return "", false
			}
			b.WriteString(strings.Repeat("0", n))
		case 'a':
			b.WriteString("PM")
		case 'E':
			if n >= 4 {
				b.WriteString("Monday")
			} else {
				b.WriteString("Mon")
			}
		case 'X', 'x':
			switch n {
			case 1:
				b.WriteString("Z07")
			case 2:
				b.WriteString("Z0700")
			default:
				b.WriteString("Z07:00")
			}
		case 'Z':
			if n >= 3 {
				b.WriteString("-07:00")
			} else {
				b.WriteString("-0700")
			}
		case 'z', 'V':
			b.WriteString("MST")
		default:
			if (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') {
				return "", false
			}
			b.WriteString(p[i:j])
		}
		i = j
	}
	return b.String(), true
}

// parseDateFormat parses s with a single Elasticsearch date format.
func parseDateFormat(s, format string) (time.Time, error) {
	switch format {
	case "strict_date_optional_time", "strict_date_optional_time_nanos", "strict_date_time", "strict_date_time_no_millis",
		"strict_date", "strict_date_hour_minute_second", "strict_date_hour_minute_second_millis", "strict_date_hour_minute_second_fraction",
		"strict_year_month_day", "strict_year_month", "strict_year":
		return parseISO(s, true)
	case "date_optional_time", "date_time", "date", "date_time_no_millis", "date_hour_minute_second", "date_hour_minute_second_millis",
		"year_month_day", "year_month", "year", "iso8601":
		return parseISO(s, false)
	case "epoch_millis":
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || strings.ContainsAny(s, "eE") {
			return time.Time{}, fmt.Errorf("failed to parse date [%s]", s)
		}
		ms := math.Floor(f)
		return time.UnixMilli(int64(ms)).Add(time.Duration((f - ms) * 1e6)).UTC(), nil
	case "epoch_second":
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || strings.ContainsAny(s, "eE") {
			return time.Time{}, fmt.Errorf("failed to parse date [%s]", s)
		}
		sec := math.Floor(f)
		return time.Unix(int64(sec), int64((f-sec)*1e9)).UTC(), nil
	case "basic_date":
		return time.Parse("20060102", s)
	case "basic_date_time":
		return time.Parse("20060102T150405.000Z07:00", s)
	}
	layout, ok := javaLayout(format)
	if !ok {
		return time.Time{}, fmt.Errorf("invalid format [%s]", format)
	}
	t, err := time.Parse(layout, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("failed to parse date [%s]", s)
	}
	return t.UTC(), nil
}

// parseDateFormats tries each of the "||"-separated formats.
func parseDateFormats(s, formats string) (time.Time, string, error) {
	if !strings.Contains(formats, "||") {
		t, err := parseDateFormat(s, formats)
		return t, formats, err
	}
	// The formats are cut one by one (no slice per value: this runs for
	// every date of every document indexed).
	var firstErr error
	for rest, more := formats, true; more; {
		var f string
		f, rest, more = strings.Cut(rest, "||")
		t, err := parseDateFormat(s, strings.TrimSpace(f))
		if err == nil {
			return t, f, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return time.Time{}, "", firstErr
}

// parseDateValue parses a source or query value for a date field.
func parseDateValue(v any, fm *fieldMapping) (time.Time, bool, error) {
	format := dateFormatOf(fm)
	switch t := v.(type) {
	case string:
		tm, _, err := parseDateFormats(t, format)
		if err != nil {
			return time.Time{}, false, err
		}
		return tm, true, nil
	case json.Number, float64, int, int64:
		s, _ := asString(t)
		if strings.Contains(format, "epoch_second") && !strings.Contains(format, "epoch_millis") {
			tm, err := parseDateFormat(s, "epoch_second")
			return tm, err == nil, err
		}
		tm, err := parseDateFormat(s, "epoch_millis")
		return tm, err == nil, err
	}
	return time.Time{}, false, fmt.Errorf("failed to parse date [%v]", v)
}

// formatDate renders t in an Elasticsearch date format.
func formatDate(t time.Time, format string, nanos bool) string {
	if i := strings.Index(format, "||"); i >= 0 {
		format = format[:i]
	}
	t = t.UTC()
	switch format {
	case "epoch_millis":
		return strconv.FormatInt(t.UnixMilli(), 10)
	case "epoch_second":
		return strconv.FormatInt(t.Unix(), 10)
	case "strict_date_optional_time", "date_optional_time", "strict_date_optional_time_nanos", "strict_date_time", "date_time", "iso8601", "":
		base := t.Format("2006-01-02T15:04:05")
		ns := t.Nanosecond()
		if !nanos && format != "strict_date_optional_time_nanos" {
			ns = ns / 1e6 * 1e6
		}
		frac := fmt.Sprintf("%09d", ns)
		frac = strings.TrimRight(frac, "0")
		for len(frac) < 3 {
			frac += "0"
		}
		return base + "." + frac + "Z"
	case "strict_date", "date", "year_month_day", "strict_year_month_day":
		return t.Format("2006-01-02")
	}
	layout, ok := javaLayout(format)
	if !ok {
		return t.Format(time.RFC3339Nano)
	}
	return t.Format(layout)
}

var mathOpRe = regexp.MustCompile(`^([+-])(\d+)([yMwdhHms])`)

// dateMath evaluates expressions such as now-7d/d or 2022-12-31||/d.
func dateMath(expr string, now time.Time, roundUp bool, fm *fieldMapping) (time.Time, bool, error) {
	var base time.Time
	var rest string
	switch {
	case strings.HasPrefix(expr, "now"):
		base = now.UTC()
		rest = expr[3:]
	case strings.Contains(expr, "||"):
		i := strings.Index(expr, "||")
		t, _, err := parseDateValue(expr[:i], fm)
		if err != nil {
			return time.Time{}, false, err
		}
		base, rest = t, expr[i+2:]
	default:
		t, _, err := parseDateValue(expr, fm)
		if err != nil {
			return time.Time{}, false, err
		}
		return t, true, nil
	}
	for rest != "" {
		if rest[0] == '/' {
			if len(rest) < 2 {
				return time.Time{}, false, fmt.Errorf("truncated date math [%s]", expr)
			}
			base = roundDate(base, rest[1], roundUp)
			rest = rest[2:]
			continue
		}
		m := mathOpRe.FindStringSubmatch(rest)
		if m == nil {
			return time.Time{}, false, fmt.Errorf("operator not supported for date math [%s]", expr)
		}
		n, _ := strconv.Atoi(m[2])
		if m[1] == "-" {
			n = -n
		}
		switch m[3][0] {
		case 'y':
			base = base.AddDate(n, 0, 0)
		case 'M':
			base = base.AddDate(0, n, 0)
		case 'w':
			base = base.AddDate(0, 0, 7*n)
		case 'd':
			base = base.AddDate(0, 0, n)
		case 'h', 'H':
			base = base.Add(time.Duration(n) * time.Hour)
		case 'm':
			base = base.Add(time.Duration(n) * time.Minute)
		case 's':
			base = base.Add(time.Duration(n) * time.Second)
		}
		rest = rest[len(m[0]):]
	}
	return base, true, nil
}

func roundDate(t time.Time, unit byte, up bool) time.Time {
	var start, next time.Time
	switch unit {
	case 'y':
		start = time.Date(t.Year(), 1, 1, 0, 0, 0, 0, time.UTC)
		next = start.AddDate(1, 0, 0)
	case 'M':
		start = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
		next = start.AddDate(0, 1, 0)
	case 'w':
		wd := (int(t.Weekday()) + 6) % 7
		start = time.Date(t.Year(), t.Month(), t.Day()-wd, 0, 0, 0, 0, time.UTC)
		next = start.AddDate(0, 0, 7)
	case 'd':
		start = time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
		next = start.AddDate(0, 0, 1)
	case 'h', 'H':
		start = t.Truncate(time.Hour)
		next = start.Add(time.Hour)
	case 'm':
		start = t.Truncate(time.Minute)
		next = start.Add(time.Minute)
	case 's':
		start = t.Truncate(time.Second)
		next = start.Add(time.Second)
	default:
		return t
	}
	if up {
		return next.Add(-time.Millisecond)
	}
	return start
}

// resolveDateMathName expands <static{date-math{format|tz}}> index names.
func resolveDateMathName(name string, now time.Time) (string, error) {
	if !strings.HasPrefix(name, "<") || !strings.HasSuffix(name, ">") {
		return name, nil
	}
	s := name[1 : len(name)-1]
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' && i+1 < len(s) {
			b.WriteByte(s[i+1])
			i++
			continue
		}
		if c != '{' {
			if c == '}' {
				return "", fmt.Errorf("invalid dynamic name expression [%s]. invalid character at position [%d]. `{` and `}` are reserved characters and should be escaped when used as part of the index name using `\\` (e.g. `\\{text\\}`)", s, i)
			}
			b.WriteByte(c)
			continue
		}
		// find matching close brace, allowing one nested {format}
		depth := 0
		j := i
		for ; j < len(s); j++ {
			if s[j] == '{' {
				depth++
			} else if s[j] == '}' {
				depth--
				if depth == 0 {
					break
				}
			}
		}
		if j >= len(s) {
			return "", fmt.Errorf("invalid dynamic name expression [%s]. date math placeholder is open ended", s)
		}
		inner := s[i+1 : j]
		expr, format := inner, "uuuu.MM.dd"
		if k := strings.IndexByte(inner, '{'); k >= 0 {
			expr = inner[:k]
			format = strings.TrimSuffix(inner[k+1:], "}")
			if p := strings.IndexByte(format, '|'); p >= 0 {
				format = format[:p]
			}
		}
		t, _, err := dateMath(expr, now, false, &fieldMapping{Format: "strict_date_optional_time||epoch_millis||" + format})
		if err != nil {
			return "", err
		}
		b.WriteString(formatDate(t, format, false))
		i = j
	}
	return b.String(), nil
}
