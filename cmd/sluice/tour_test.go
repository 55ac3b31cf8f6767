package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// The tour is a test (issue 36.1): every command of the README's "A 5-minute
// tour" and every request example of docs/api.md is read from the Markdown,
// run against a real `sluice dev` (curl for the HTTP ones, the built binary
// for the operator ones) and its answer checked against what the text
// promises. The commands are never copied into the test, so the docs and the
// test cannot drift apart: a changed command is run as written, a new one
// fails until it has a check.

// mdBlock is one fenced code block of a Markdown file.
type mdBlock struct {
	lang    string
	line    int    // line of the first content line
	section string // the nearest "## " heading above it
	text    string
}

func mdBlocks(t *testing.T, file string) []mdBlock {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []mdBlock
	var cur *mdBlock
	section := ""
	for i, l := range strings.Split(string(b), "\n") {
		switch {
		case cur == nil && strings.HasPrefix(l, "```"):
			cur = &mdBlock{lang: strings.TrimPrefix(l, "```"), line: i + 2, section: section}
		case cur != nil && strings.HasPrefix(l, "```"):
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += l + "\n"
		case strings.HasPrefix(l, "## "):
			section = strings.TrimPrefix(l, "## ")
		}
	}
	return out
}

// shCommand is one command of a shell block: its words after quote
// removal, the comment lines before it and the comment after it.
type shCommand struct {
	at      string // file:line
	words   []string
	comment string
}

func (c shCommand) String() string { return c.at + ": " + strings.Join(c.words, " ") }

// shellCommands splits a shell block into commands: backslash-newline
// continues a line, '…' and "…" quote, # starts a comment at a word's start.
// Enough shell for documentation; no expansion.
func shellCommands(t *testing.T, file string, b mdBlock) []shCommand {
	t.Helper()
	var out []shCommand
	var comment []string
	lines := strings.Split(strings.TrimSuffix(b.text, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		start := b.line + i
		logical := lines[i]
		for strings.HasSuffix(logical, "\\") && i+1 < len(lines) {
			i++
			logical = strings.TrimSuffix(logical, "\\") + " " + lines[i]
		}
		var words []string
		var w strings.Builder
		inWord, rest := false, ""
		for j := 0; j < len(logical); j++ {
			c := logical[j]
			switch {
			case c == '\'':
				k := strings.IndexByte(logical[j+1:], '\'')
				if k < 0 {
					t.Fatalf("%s:%d: unterminated '", file, start)
				}
				w.WriteString(logical[j+1 : j+1+k])
				j, inWord = j+1+k, true
			case c == '"':
				j++
				for ; j < len(logical) && logical[j] != '"'; j++ {
					if logical[j] == '\\' && j+1 < len(logical) && strings.IndexByte("\"\\$`", logical[j+1]) >= 0 {
						j++
					}
					w.WriteByte(logical[j])
				}
				if j == len(logical) {
					t.Fatalf("%s:%d: unterminated \"", file, start)
				}
				inWord = true
			case c == '\\' && j+1 < len(logical):
				j++
				w.WriteByte(logical[j])
				inWord = true
			case c == ' ' || c == '\t':
				if inWord {
					words = append(words, w.String())
					w.Reset()
					inWord = false
				}
			case c == '#' && !inWord:
				rest = strings.TrimSpace(logical[j+1:])
				j = len(logical)
			default:
				w.WriteByte(c)
				inWord = true
			}
		}
		if inWord {
			words = append(words, w.String())
		}
		if len(words) == 0 {
			if rest != "" {
				comment = append(comment, rest)
			}
			continue
		}
		out = append(out, shCommand{at: fmt.Sprintf("%s:%d", file, start), words: words,
			comment: strings.Join(append(comment, rest), " ")})
		comment = nil
	}
	return out
}

// curlRun is the answer of one curl command.
type curlRun struct {
	status int
	body   []byte
}

func (r curlRun) json(t *testing.T, c shCommand) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("%s: the answer is not a JSON object: %v\n%s", c, err, r.body)
	}
	return m
}

// runCurl runs the command's curl with the answer's status appended to its
// output (-w), and nothing else changed.
func runCurl(t *testing.T, c shCommand, args []string) curlRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], append(args[1:], "-w", "\n%{http_code}")...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", c, err, out)
	}
	i := strings.LastIndexByte(string(out), '\n')
	status, err := strconv.Atoi(string(out[i+1:]))
	if err != nil {
		t.Fatalf("%s: no status in the output: %q", c, out)
	}
	return curlRun{status: status, body: out[:i]}
}

// jsonAt returns the value at a dotted path (array elements as numbers).
func jsonAt(v any, path string) any {
	for _, k := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			v = x[k]
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// tourDev starts `sluice dev` as the README's `make dev` does — its own
// PostgreSQL in .dev/, no DATABASE_URL — in a temp dir, on free ports.
type tourDev struct {
	*devStack
	dir  string // the working directory, holding .dev
	proc *devProc
	vars map[string]string // placeholders → values from earlier answers
}

func startTourDev(t *testing.T) *tourDev {
	bin := buildSluice(t)
	d := &tourDev{devStack: newDevStack(t, bin, ""), dir: t.TempDir(), vars: map[string]string{}}
	d.dataDir = filepath.Join(d.dir, ".dev")
	d.proc = d.start(t)
	testenv.WaitForEvery(t, 3*time.Minute, 250*time.Millisecond, "sluice dev's API", func() bool {
		if d.proc.exited() {
			t.Fatalf("sluice dev exited\n%s", d.proc.out.String())
		}
		code, _ := httpDo("GET", "http://"+d.apiAddr+"/readyz", "")
		return code == 200
	})
	return d
}

// subst moves the documented default addresses to the test's ports and
// fills placeholders from earlier answers.
func (d *tourDev) subst(t *testing.T, c shCommand) []string {
	t.Helper()
	out := make([]string, len(c.words))
	for i, w := range c.words {
		w = strings.ReplaceAll(w, "localhost:8080", d.apiAddr)
		w = strings.ReplaceAll(w, "localhost:9200", d.esAddr)
		w = strings.ReplaceAll(w, "127.0.0.1:54329", "127.0.0.1:"+strconv.Itoa(d.pgPort))
		for _, m := range regexp.MustCompile(`<([a-z_]+)>`).FindAllStringSubmatch(w, -1) {
			v, ok := d.vars[m[1]]
			if !ok {
				t.Fatalf("%s: placeholder %s is not in an earlier answer", c, m[0])
			}
			w = strings.ReplaceAll(w, m[0], v)
		}
		out[i] = w
	}
	if out[0] == "./bin/sluice" {
		out[0] = d.bin
	}
	return out
}

// check is what the text promises for one command: the first check whose
// match is in the command's words applies; every command needs one and
// every check must be used.
type check struct {
	match string
	// retry runs the command again (a read) until ok, as the text says
	// the answer comes "once" a worker has processed something.
	retry bool
	ok    func(t *testing.T, c shCommand, r curlRun) string // "" when the answer is what the text says
}

func findCheck(t *testing.T, c shCommand, checks []check, used map[int]bool) check {
	t.Helper()
	text := strings.Join(c.words, " ")
	for i, ch := range checks {
		if !used[i] && strings.Contains(text, ch.match) {
			used[i] = true
			return ch
		}
	}
	t.Fatalf("%s: no check in the test for this command; add what its text promises", c)
	return check{}
}

func (d *tourDev) runChecked(t *testing.T, c shCommand, args []string, ch check) curlRun {
	t.Helper()
	var r curlRun
	var why string
	deadline := time.Now().Add(90 * time.Second)
	for {
		r = runCurl(t, c, args)
		if why = ch.ok(t, c, r); why == "" || !ch.retry || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if why != "" {
		t.Fatalf("%s (%s): %s\nanswer %d: %s", c, c.comment, why, r.status, r.body)
	}
	return r
}

func wantStatus(r curlRun, want int) string {
	if r.status != want {
		return fmt.Sprintf("status %d, want %d", r.status, want)
	}
	return ""
}

// wantFields checks the status and that every path has a value (any when
// want is nil, else equal to want's JSON).
func wantFields(t *testing.T, c shCommand, r curlRun, status int, fields map[string]any) string {
	if why := wantStatus(r, status); why != "" {
		return why
	}
	m := r.json(t, c)
	for path, want := range fields {
		got := jsonAt(m, path)
		if got == nil {
			return "no " + path
		}
		if want != nil && fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Sprintf("%s = %v, want %v", path, got, want)
		}
	}
	return ""
}

func esHitCount(t *testing.T, c shCommand, r curlRun) float64 {
	n, _ := jsonAt(r.json(t, c), "hits.total.value").(float64)
	return n
}

func TestTour(t *testing.T) {
	d := startTourDev(t)
	t.Run("README", func(t *testing.T) { d.readmeTour(t) })
	t.Run("api.md", func(t *testing.T) { d.apiExamples(t) })
	d.proc.stop(t)
}

func (d *tourDev) readmeTour(t *testing.T) {
	var curls, ops []shCommand
	for _, b := range mdBlocks(t, "../../README.md") {
		if b.section != "A 5-minute tour" || b.lang != "sh" {
			continue
		}
		for _, c := range shellCommands(t, "README.md", b) {
			if c.words[0] == "curl" {
				curls = append(curls, c)
			} else {
				ops = append(ops, c)
			}
		}
	}
	if len(curls) < 9 || len(ops) < 10 {
		t.Fatalf("found %d curl and %d operator commands in the README's tour", len(curls), len(ops))
	}
	checks := []check{
		{match: "POST localhost:8080/v1/dbs/shop/classes/orders/instances", ok: func(t *testing.T, c shCommand, r curlRun) string {
			why := wantFields(t, c, r, 202, map[string]any{"command_id": nil, "sequence_number": 1, "event_id": nil})
			if why == "" {
				m := r.json(t, c)
				d.vars["command_id"], d.vars["event_id"] = m["command_id"].(string), m["event_id"].(string)
			}
			return why
		}},
		{match: "/v1/commands/", retry: true, ok: func(t *testing.T, c shCommand, r curlRun) string {
			return wantFields(t, c, r, 200, map[string]any{"status": "APPLIED", "command_id": d.vars["command_id"]})
		}},
		{match: "/v1/dbs/shop/classes/orders/instances/42?expected_seq=1", ok: func(t *testing.T, c shCommand, r curlRun) string {
			return wantFields(t, c, r, 202, map[string]any{"sequence_number": 2, "instance_id": "42"})
		}},
		{match: "/v1/dbs/shop/classes/orders/instances/42", ok: func(t *testing.T, c shCommand, r curlRun) string {
			return wantFields(t, c, r, 200, map[string]any{"instance_id": "42", "sequence_number": 1, "data.total": 10})
		}},
		{match: "sluice_shop_instances/_search", retry: true, ok: func(t *testing.T, c shCommand, r curlRun) string {
			if why := wantFields(t, c, r, 200, map[string]any{"hits.hits.0._source.instance_id": "42", "hits.hits.0._source.total": 12}); why != "" {
				return why + " (the merge patch, applied)"
			}
			return ""
		}},
		{match: "sluice_shop_history/_search", retry: true, ok: func(t *testing.T, c shCommand, r curlRun) string {
			if why := wantStatus(r, 200); why != "" {
				return why
			}
			if n := esHitCount(t, c, r); n < 2 {
				return fmt.Sprintf("%v history documents, want the create and the patch", n)
			}
			return ""
		}},
		{match: "-X POST localhost:8080/v1/streams/", ok: func(t *testing.T, c shCommand, r curlRun) string {
			why := wantFields(t, c, r, 201, map[string]any{"first_sequence": 1, "last_sequence": 1, "events.0.event_id": nil,
				"events.0.position": nil, "aggregate_type": "Order", "aggregate_id": "o-1", "replayed": false})
			if why == "" { // "running it again replays the stored batch with 200"
				again := runCurl(t, c, d.subst(t, c))
				if why = wantFields(t, c, again, 200, map[string]any{"replayed": true, "first_sequence": 1}); why != "" {
					why = "run again: " + why
				}
			}
			return why
		}},
		{match: "/v1/streams/", ok: func(t *testing.T, c shCommand, r curlRun) string {
			return wantFields(t, c, r, 200, map[string]any{"events.0.sequence_number": 1, "events.0.aggregate_id": "o-1"})
		}},
	}
	used := map[int]bool{}
	for _, c := range curls {
		args := d.subst(t, c)
		if strings.Contains(strings.Join(args, " "), "/v1/log/subscribe") {
			d.subscribe(t, c, args)
			continue
		}
		d.runChecked(t, c, args, findCheck(t, c, checks, used))
	}
	for i, ch := range checks {
		if !used[i] {
			t.Errorf("no README tour command matched the check %q", ch.match)
		}
	}

	// The operator side, as written: exports, then ./bin/sluice.
	env := []string{}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "EVENT_STORE_") && !strings.HasPrefix(k, "KAFKA_") && !strings.HasPrefix(k, "ELASTICSEARCH_") &&
			k != "DATABASE_URL" && !strings.HasPrefix(k, "SLUICE_") {
			env = append(env, kv)
		}
	}
	// The defaults the README relies on (localhost:9092, localhost:9200),
	// moved to the test's free ports.
	env = append(env, "KAFKA_BROKERS="+d.kafkaAddr, "ELASTICSEARCH_URLS=http://"+d.esAddr, "SLUICE_LOG_LEVEL=warn")
	opChecks := map[string][]string{ // command → what its output must hold
		"store segments":        {"segments/", " segments, "},
		"store cat":             {`{"event_id":"` + d.vars["event_id"] + `","event_type":"CREATE_INSTANCE"`, `"event_type":"ORDER_PLACED"`},
		"relay checkpoint show": {"position", "head"},
		"registry show":         {d.vars["event_id"], "instanceworker", "applied"},
		"verify":                {"verify: 1 instances, 1 ok, 0 missing, 0 stale, 0 extra, 0 mismatched"},
		"projection list":       {"history", "instances"},
		"dlq list":              {"dlq list sluice.commands.dlq: 0 letters"},
		"migrate status":        {"0 pending"},
		"config check":          {"configuration OK"},
	}
	ran := map[string]bool{}
	for _, c := range ops {
		args := d.subst(t, c)
		switch args[0] {
		case "make": // make build: the test built the same binary with go build
			if len(args) != 2 || args[1] != "build" {
				t.Fatalf("%s: only make build is expected here", c)
			}
			continue
		case "export":
			env = append(env, args[1:]...)
			continue
		}
		if args[0] != d.bin {
			t.Fatalf("%s: not a ./bin/sluice command", c)
		}
		var name string
		var want []string
		ok := false
		for n := min(3, len(args)-1); n > 0 && !ok; n-- { // the longest subcommand with a check
			name = strings.Join(args[1:1+n], " ")
			want, ok = opChecks[name]
		}
		if !ok {
			t.Fatalf("%s: no check in the test for this command; add what its text promises", c)
		}
		ran[name] = true
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env, cmd.Dir = env, d.dir
		out, err := cmd.CombinedOutput()
		t.Logf("%s\n%s", c, out)
		if err != nil {
			t.Errorf("%s (%s): %v\n%s", c, c.comment, err, out)
			continue
		}
		for _, w := range want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%s (%s): the output lacks %q\n%s", c, c.comment, w, out)
			}
		}
	}
	for name := range opChecks {
		if !ran[name] {
			t.Errorf("no README tour command is sluice %s", name)
		}
	}
}

// subscribe runs the never-ending curl -N of an SSE stream, reads the first
// events and stops it.
func (d *tourDev) subscribe(t *testing.T, c shCommand, args []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	const want = 3
	var ids []int64
	var types []string
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for len(types) < want && sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			id, err := strconv.ParseInt(strings.TrimPrefix(line, "id: "), 10, 64)
			if err != nil {
				t.Fatalf("%s: id line %q", c, line)
			}
			ids = append(ids, id)
		case strings.HasPrefix(line, "data: "):
			var e struct {
				EventType string `json:"event_type"`
			}
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &e); err != nil || e.EventType == "" {
				t.Fatalf("%s: data line is not an envelope: %q", c, line)
			}
			types = append(types, e.EventType)
		}
	}
	if len(types) < want || len(ids) != len(types) {
		t.Fatalf("%s (%s): %d events (ids %v) within 30s, want the first %d of the log", c, c.comment, len(types), ids, want)
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("%s: ids not increasing: %v", c, ids)
		}
	}
	if types[0] != "CREATE_INSTANCE" {
		t.Errorf("%s: the log starts with %s, want the tour's first command CREATE_INSTANCE (%v)", c, types[0], types)
	}
}

// apiExamples runs docs/api.md's curl lines, and its raw request examples
// ("POST /v1/…" and a JSON body), and checks each against the answer block
// that follows ("202 {…}": every member that is not "…").
func (d *tourDev) apiExamples(t *testing.T) {
	blocks := mdBlocks(t, "../../docs/api.md")
	answer := regexp.MustCompile(`^(\d{3})(?: ETag: \S+)?\s+(\{[\s\S]*\})\s*$`)
	request := regexp.MustCompile(`^(GET|POST|PATCH|DELETE) (/\S+)\n([\s\S]*)$`)
	ran := 0
	for i, b := range blocks {
		var c shCommand
		var args []string
		switch m := request.FindStringSubmatch(b.text); {
		case strings.HasPrefix(b.text, "curl "):
			cs := shellCommands(t, "docs/api.md", b)
			if len(cs) != 1 {
				t.Fatalf("docs/api.md:%d: %d commands in one block", b.line, len(cs))
			}
			c = cs[0]
			args = d.subst(t, c)
			args = append(args[:1], append([]string{"-s"}, args[1:]...)...)
		case m != nil && !strings.Contains(m[2], "…"):
			// A raw request: send it as curl would, JSON body.
			c = shCommand{at: fmt.Sprintf("docs/api.md:%d", b.line), words: []string{m[1], m[2]}}
			args = []string{"curl", "-s", "-X", m[1], "http://" + d.apiAddr + m[2], "-H", "Content-Type: application/json", "-d", m[3]}
		default:
			continue
		}
		ran++
		r := runCurl(t, c, args)
		// The answer: the next block when it is one, else what the text
		// after the example says (the append's 201).
		var want int
		var fields map[string]any
		if i+1 < len(blocks) {
			if m := answer.FindStringSubmatch(blocks[i+1].text); m != nil {
				want, _ = strconv.Atoi(m[1])
				if err := json.Unmarshal([]byte(m[2]), &fields); err != nil {
					t.Fatalf("docs/api.md:%d: the answer block is not JSON: %v", blocks[i+1].line, err)
				}
			}
		}
		if want == 0 {
			if !strings.HasPrefix(c.words[1], "/v1/streams/") {
				t.Fatalf("%s: no answer block after it and no check in the test", c)
			}
			// "Reply: 201 {aggregate_type, aggregate_id, first_sequence, last_sequence, replayed: false, events: [{event_id, sequence_number, position}]}"
			want, fields = 201, map[string]any{"aggregate_type": "…", "aggregate_id": "…", "first_sequence": "…", "last_sequence": "…",
				"replayed": false, "events": []any{map[string]any{"event_id": "…", "sequence_number": "…", "position": "…"}}}
		}
		if why := wantStatus(r, want); why != "" {
			t.Errorf("%s: %s\n%s", c, why, r.body)
			continue
		}
		got := r.json(t, c)
		for _, p := range documentedFields(fields, "") {
			gv := jsonAt(got, p.path)
			if gv == nil {
				t.Errorf("%s: the answer lacks %s\n%s", c, p.path, r.body)
			} else if p.value != "…" && fmt.Sprint(gv) != fmt.Sprint(p.value) {
				t.Errorf("%s: %s = %v, the text says %v", c, p.path, gv, p.value)
			}
		}
	}
	if ran < 2 {
		t.Fatalf("ran %d examples of docs/api.md", ran)
	}
}

type docField struct {
	path  string
	value any
}

// documentedFields flattens an answer block: every leaf member with its
// value ("…" means any value).
func documentedFields(v any, prefix string) []docField {
	var out []docField
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			out = append(out, documentedFields(e, strings.TrimPrefix(prefix+"."+k, "."))...)
		}
	case []any:
		for i, e := range x {
			out = append(out, documentedFields(e, prefix+"."+strconv.Itoa(i))...)
		}
	default:
		out = append(out, docField{prefix, v})
	}
	return out
}
