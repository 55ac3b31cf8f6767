package acceptance

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/registry/registrytest"
	"github.com/sluicehq/sluice/shared/claim"
)

// The declarative projection of TestSharedDocumentTwoWriters (issue 39):
// one document per site, gathering the readings of every device of the
// site, so the events of many aggregates (on every partition) update a
// few documents.
const (
	siteProjection = "site_counts"
	siteScope      = "sharedoc"
	siteYAML       = `# Readings per site: many devices (aggregates) share one document.
name: site_counts
version: 1
scope: sharedoc
event_types: [READING_TAKEN]
aggregate_types: [Device]
key: event.data.site
updates:
  - set: site
    value: key
  - increment: count
  - increment: total
    by: event.data.value
mappings:
  properties:
    site: {type: keyword}
    count: {type: long}
    total: {type: long}
`
)

var (
	siteHandler = projectionworker.HandlerName(siteProjection, 1)
	siteGroup   = "sluice." + projectionworker.GroupName(siteProjection, 1)
	siteIndex   = projectionworker.IndexNames(indexPrefix, siteScope, siteProjection, 1).Index
)

// sharedocRuns is the number of bursts per table entry
// (SLUICE_SHAREDOC_RUNS, default 2).
func sharedocRuns(t *testing.T) int {
	t.Helper()
	v := os.Getenv("SLUICE_SHAREDOC_RUNS")
	if v == "" {
		return 2
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("SLUICE_SHAREDOC_RUNS=%q: want a positive integer", v)
	}
	return n
}

// appendReadings appends events READING_TAKEN events to device's stream
// through the event API, batch events per request, each event
// {"site": site, "value": k}. Retries a connection error or a 5xx with the
// same event ids (the append is idempotent per event_id).
func (p *pipeline) appendReadings(device, site string, events, batch int) error {
	path := "/v1/streams/Device/" + url.PathEscape(device) + "/events"
	for from := 0; from < events; from += batch {
		var evs []map[string]any
		for k := from; k < min(from+batch, events); k++ {
			evs = append(evs, map[string]any{"event_id": uuid.NewString(), "event_type": "READING_TAKEN",
				"data": map[string]any{"site": site, "value": k % 7}})
		}
		body := map[string]any{"events": evs}
		deadline := time.Now().Add(60 * time.Second)
		for {
			code, b, err := p.call(http.MethodPost, path, body, "")
			if err == nil && (code == http.StatusCreated || code == http.StatusOK) {
				break
			}
			if err == nil && code < 500 {
				return fmt.Errorf("append to %s: %d %s", device, code, b)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("append to %s: still failing: %d %s %v", device, code, b, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

// handlerRows returns every registry row of handler.
func (p *pipeline) handlerRows(handler string) []claim.Row {
	p.t.Helper()
	ctx, cancel := p.ctx(30 * time.Second)
	defer cancel()
	rows, err := registrytest.Rows(ctx, p.pool, handler)
	if err != nil {
		p.t.Fatal(err)
	}
	return rows
}

// siteDoc is a site document: as read from Elasticsearch, or as `sluice
// projection test` predicts it.
type siteDoc struct {
	Found   bool `json:"found"`
	Version int64
	Site    string
	Count   int64
	Total   int64
	Applied map[string]int64
}

func (d *siteDoc) decode(src json.RawMessage) error {
	var s struct {
		Site   string  `json:"site"`
		Count  float64 `json:"count"`
		Total  float64 `json:"total"`
		Sluice struct {
			Applied map[string]int64 `json:"applied"`
		} `json:"sluice"`
	}
	if err := json.Unmarshal(src, &s); err != nil {
		return err
	}
	d.Site, d.Count, d.Total, d.Applied = s.Site, int64(s.Count), int64(s.Total), s.Sluice.Applied
	return nil
}

// siteDocument reads site's document from the projection's index
// (real-time GET).
func (p *pipeline) siteDocument(site string) siteDoc {
	p.t.Helper()
	var g struct {
		Found   bool            `json:"found"`
		Version int64           `json:"_version"`
		Source  json.RawMessage `json:"_source"`
	}
	code := p.esGet("/"+siteIndex+"/_doc/"+url.PathEscape(site), &g)
	d := siteDoc{Found: code == http.StatusOK && g.Found, Version: g.Version}
	if d.Found {
		if err := d.decode(g.Source); err != nil {
			p.t.Fatalf("document %s: %v: %s", site, err, g.Source)
		}
	}
	return d
}

// predictSites runs `sluice projection test` (the built binary) on the
// projection file over events (JSON Lines as `sluice store cat` prints
// them) and returns the predicted document of each site.
func (p *pipeline) predictSites(file string, events []storeRecord) map[string]siteDoc {
	p.t.Helper()
	path := filepath.Join(p.t.TempDir(), "events.jsonl")
	var b strings.Builder
	for _, r := range events {
		b.Write(r.Raw)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		p.t.Fatal(err)
	}
	out, errOut, code := p.cli("projection", "test", file, "--events", path)
	if code != 0 {
		p.t.Fatalf("sluice projection test: exit %d: %s", code, errOut)
	}
	docs := map[string]siteDoc{}
	for _, l := range lines(out) {
		var sd struct {
			Projection string          `json:"projection"`
			Scope      string          `json:"scope"`
			ID         string          `json:"_id"`
			Version    int64           `json:"_version"`
			Source     json.RawMessage `json:"_source"`
		}
		if err := json.Unmarshal([]byte(l), &sd); err != nil {
			p.t.Fatalf("projection test line %q: %v", l, err)
		}
		if sd.Projection != siteProjection || sd.Scope != siteScope {
			p.t.Fatalf("projection test: unexpected document %s", l)
		}
		d := siteDoc{Found: true, Version: sd.Version}
		if err := d.decode(sd.Source); err != nil {
			p.t.Fatalf("projection test line %q: %v", l, err)
		}
		docs[sd.ID] = d
	}
	return docs
}

// TestSharedDocumentTwoWriters is issue 39 part 1 (lost updates): a
// declarative projection whose key gathers the events of many aggregates
// into one document (readings per site over many devices), run by two or
// three projection-worker processes in one consumer group. A burst of
// events is appended while the group is paused (sluice consumer pause),
// then the group is resumed so every worker writes the same site documents
// at once. Once the group has committed everything and the registry has
// no claim in progress or failed, every site document must hold exactly
// what `sluice projection test` computes from the same events (and what
// counting them in `sluice store cat` gives): no increment lost, none
// counted twice, every event done/applied (none ignored: every event is
// handled), nothing dead and no DLQ record. The workers'
// sluice_projection_conflicts_total shows the writers really contended.
func TestSharedDocumentTwoWriters(t *testing.T) {
	t.Parallel()
	runs := sharedocRuns(t)
	for _, tc := range []struct {
		workers, partitions, devices, sites, events int
	}{
		{workers: 2, partitions: 4, devices: 24, sites: 2, events: 1200},
		{workers: 3, partitions: 6, devices: 30, sites: 3, events: 1200},
	} {
		t.Run(fmt.Sprintf("workers=%d", tc.workers), func(t *testing.T) {
			t.Parallel()
			runSharedDocument(t, tc.workers, tc.partitions, tc.devices, tc.sites, tc.events, runs)
		})
	}
}

func runSharedDocument(t *testing.T, workers, partitions, devices, sites, events, runs int) {
	dir := t.TempDir()
	file := filepath.Join(dir, "site_counts.yaml")
	if err := os.WriteFile(file, []byte(siteYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	p := newPipeline(t, setup{partitions: partitions, env: map[string]string{
		"SLUICE_PROJECTIONS_FILE":    file,
		"WORKER_PAUSE_POLL_INTERVAL": "250ms",
		// Contention makes events retry (a 409 is retried on the new
		// state); the default of 5 attempts could dead-letter an event
		// that only lost races, which is not what this test is about.
		"PROJECTION_WORKER_MAX_RETRIES": "30",
	}})
	for _, s := range []struct{ name, kind string }{{"api", kindAPI}, {"relay", kindRelay}} {
		p.add(s.name, s.kind, nil).start()
	}
	var ws []*service
	for i := range workers {
		// SLUICE_PROJECTIONS empty: the worker runs the file's projection
		// only (not the built-in history).
		// Debug logs: the "poll" lines tell when a pause took effect.
		w := p.add(fmt.Sprintf("projection-worker-%d", i), kindProjection, map[string]string{"SLUICE_PROJECTIONS": "", "SLUICE_LOG_LEVEL": "debug"})
		w.evictGroup = "" // several members: never evict the group
		ws = append(ws, w)
	}
	for _, w := range ws {
		w.start()
	}
	for _, s := range append([]*service{p.service("api"), p.service("relay")}, ws...) {
		s.waitReady(90 * time.Second)
	}
	waitFor(t, 90*time.Second, fmt.Sprintf("%d workers each own a partition", workers), func() bool {
		return p.spread(siteGroup, eventsTopic, workers)
	})

	conflicts := func() float64 {
		var n float64
		for _, w := range ws {
			n += w.metric("sluice_projection_conflicts_total", `projection="`+siteProjection+`"`)
		}
		return n
	}
	parent := t
	var total int // events appended in all runs so far
	var contended int
	for run := 1; run <= runs; run++ {
		stopped := true // a step that ends with Fatal leaves it set
		t.Run(fmt.Sprintf("run=%d", run), func(t *testing.T) {
			// The pipeline's helpers fail the test they are given: this
			// step's, for as long as it runs.
			p.t = t
			defer func() { p.t = parent }()
			siteOf := func(d int) string { return fmt.Sprintf("r%d-site-%d", run, d%sites) }
			conflictsBefore := conflicts()

			// 1. Pause the group; every worker confirms.
			if out, errOut, code := p.cli("consumer", "pause", "--group", siteGroup, "--allow-new", "--yes", "--reason", "issue 39 burst"); code != 0 {
				t.Fatalf("consumer pause: exit %d %s %s", code, out, errOut)
			}
			// The gauge turns 1 once the pause has taken effect in that
			// worker: it fetches nothing more and has finished and
			// committed what it fetched (docs/worker-runtime.md).
			waitFor(t, 30*time.Second, "the pause taken effect in every worker", func() bool {
				for _, w := range ws {
					if w.metric("sluice_worker_paused", `handler="`+siteHandler+`"`) != 1 {
						return false
					}
				}
				return true
			})

			// 2. The burst: events readings over devices, appended by
			// several clients at once; each device's events in order.
			start := time.Now()
			per := events / devices
			var wg sync.WaitGroup
			errc := make(chan error, devices)
			sem := make(chan struct{}, 6)
			for d := range devices {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sem <- struct{}{}
					defer func() { <-sem }()
					errc <- p.appendReadings(fmt.Sprintf("r%d-dev-%02d", run, d), siteOf(d), per, 8)
				}()
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				if err != nil {
					t.Fatal(err)
				}
			}
			total += per * devices
			waitFor(t, 90*time.Second, "the relay published the burst", func() bool {
				return p.records(eventsTopic) >= int64(total)
			})
			if n := len(p.handlerRows(siteHandler)); n != total-per*devices {
				t.Fatalf("%d registry rows while the group was paused, want %d (the previous runs')", n, total-per*devices)
			}
			t.Logf("appended and published %d events of %d devices in %d sites in %s", per*devices, devices, sites, time.Since(start).Round(time.Millisecond))

			// 3. Resume: every worker writes the site documents at once.
			start = time.Now()
			if out, errOut, code := p.cli("consumer", "resume", "--group", siteGroup, "--allow-new", "--yes"); code != 0 {
				t.Fatalf("consumer resume: exit %d %s %s", code, out, errOut)
			}
			waitFor(t, 120*time.Second, "the group committed the burst and every event finished", func() bool {
				if !p.caughtUp(siteGroup, eventsTopic) {
					return false
				}
				rows := p.handlerRows(siteHandler)
				if len(rows) < total {
					return false
				}
				for _, r := range rows {
					if r.Status == claim.StatusProcessing || r.Status == claim.StatusFailed {
						return false
					}
				}
				return true
			})
			t.Logf("caught up %s after the resume", time.Since(start).Round(time.Millisecond))

			// 4. The end state.
			recs := p.storeCat("--from", "1")
			var readings []storeRecord
			want := map[string]int64{}  // site → readings in the store
			runIDs := map[string]bool{} // this run's event ids
			for _, r := range recs {
				if r.Kind == "domain" && strings.HasPrefix(string(r.Key), "Device:") {
					readings = append(readings, r)
					if s, _ := r.Data["site"].(string); strings.HasPrefix(s, fmt.Sprintf("r%d-", run)) {
						want[s]++
						runIDs[r.EventID] = true
					}
				}
			}
			if len(readings) != total {
				t.Fatalf("sluice store cat: %d readings, want %d", len(readings), total)
			}
			predicted := p.predictSites(file, readings)
			var lost []string
			for s := range sites {
				site := fmt.Sprintf("r%d-site-%d", run, s)
				got, pred := p.siteDocument(site), predicted[site]
				if !pred.Found || pred.Count != want[site] {
					t.Errorf("%s: sluice projection test predicts count %d (found %t), sluice store cat counts %d", site, pred.Count, pred.Found, want[site])
				}
				if !got.Found {
					t.Errorf("%s: no document", site)
					continue
				}
				if got.Count != pred.Count || got.Total != pred.Total || got.Site != site {
					lost = append(lost, fmt.Sprintf("%s: %d", site, pred.Count-got.Count))
					t.Errorf("%s: document count %d total %d (site %q, _version %d), sluice projection test predicts count %d total %d: %d increments lost",
						site, got.Count, got.Total, got.Site, got.Version, pred.Count, pred.Total, pred.Count-got.Count)
				}
				if !reflect.DeepEqual(got.Applied, pred.Applied) {
					var diff []string
					for _, agg := range slices.Sorted(maps.Keys(pred.Applied)) {
						if got.Applied[agg] != pred.Applied[agg] {
							diff = append(diff, fmt.Sprintf("%s %d≠%d", agg, got.Applied[agg], pred.Applied[agg]))
						}
					}
					t.Errorf("%s: sluice.applied differs from the prediction (document ≠ predicted): %s", site, strings.Join(diff, ", "))
				}
			}

			// The registry: one row per reading of this run, done and
			// applied. Every event is handled by the projection, so a run
			// without faults has no legitimate ignored row.
			rows := p.handlerRows(siteHandler)
			byOutcome := map[string]int{}
			multi, mine := 0, 0
			for _, r := range rows {
				if !runIDs[r.EventID] {
					continue
				}
				mine++
				key := string(r.Status)
				if r.Outcome != nil {
					key += "/" + string(r.Outcome.Result)
				}
				byOutcome[key]++
				if r.Attempts > 1 {
					multi++
				}
			}
			if len(rows) != total || mine != len(runIDs) || byOutcome["done/applied"] != len(runIDs) {
				t.Errorf("registry of %s: %d rows in all, %d of this run's %d events %v, want every one done/applied (ignored: %d, legitimate: 0)",
					siteHandler, len(rows), mine, len(runIDs), byOutcome, byOutcome["done/"+string(claim.OutcomeIgnored)])
			}
			if n := p.records(eventsDLQ); n != 0 {
				t.Errorf("%s holds %d records, want 0", eventsDLQ, n)
			}
			c := conflicts() - conflictsBefore
			if c > 0 {
				contended++
			}
			t.Logf("run %d: %d workers, %d events, %d devices, %d sites: %v conflicts (sluice_projection_conflicts_total), %d events claimed more than once, registry %v, lost per site %v",
				run, workers, per*devices, devices, sites, c, multi, byOutcome, lost)
			stopped = false
		})
		if stopped {
			break // the pipeline is in an unknown state: no further burst
		}
	}
	if !t.Failed() && contended == 0 {
		t.Errorf("no run counted a projection conflict: the workers never contended, so the test proved nothing")
	}
}
