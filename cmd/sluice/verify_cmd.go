package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore/backend"
	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/shared/envelope"
)

// exitVerifyDiffers is the exit code of `sluice verify` when the event store
// and Elasticsearch disagree.
const exitVerifyDiffers = 4

// newVerifyCmd is `sluice verify`: flags and printing; the comparison is
// instanceworker.Verify, which the admin API calls too.
func newVerifyCmd() *cobra.Command {
	var db, class string
	var version, concurrency int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Compare the event store with Elasticsearch for a db/class: missing, stale, extra or mismatched instance documents",
		Long: `sluice verify reads every instance aggregate of a db/class from the event store's
index, reads its last domain event (the state of the highest applied slot) and compares it
with the instance document in Elasticsearch ({prefix}{db}_instances write alias):

  missing   the store has the instance, Elasticsearch has no document
  stale     the document's sequence_number is below the store's last domain slot
  extra     Elasticsearch has a document of the class the store does not know
  mismatch  same slot, but a different deleted flag, event_id or state; or the document
            is ahead of the store

Candidates for missing and stale are re-checked with a real-time GET. On a running
pipeline, recent commands may show as stale until the instance worker catches up: re-run.
Exit code 0 when everything matches, 4 when anything differs, 3 when neither side
holds an instance of the db/class (a mistyped --db or --class).`,
		Example: `  sluice verify --db shop --class orders
  sluice verify --db shop --class orders --json | jq .problems`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case version < 0:
				return usage("--index-version %d: want 0 (the live version) or a version >= 1", version)
			case concurrency < 1:
				return usage("--concurrency %d: want at least 1", concurrency) // it was read as 1
			}
			if err := envelope.ValidateDBName(db); err != nil {
				return usage("--db: %w", err)
			}
			if err := envelope.ValidateClassName(class); err != nil {
				return usage("--class: %w", err)
			}
			cfg, logger, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			pools, err := openPools(cmd, cfg, migrations.RoleStore) // with the servers of EVENT_STORE_SHARD_MAP
			if err != nil {
				return err
			}
			defer pools.Close()
			bucket, err := backend.New(ctx, cfg.EventStore) // no self-test: verify only reads
			if err != nil {
				return err
			}
			cfg.EventStore.LayoutNoWait = true // a command: fail now, do not wait (openDepsWith)
			st, err := eventstore.New(cfg.EventStore, eventstore.Deps{Pool: pools.Store, ShardPools: pools.StoreShards, Bucket: bucket, Logger: logger})
			if err != nil {
				return err
			}
			defer func() { _ = st.Close() }()
			es, err := readmodel.NewClient(cfg.Elasticsearch)
			if err != nil {
				return err
			}
			var bar *progress
			barMade := false
			rep, err := instanceworker.Verify(ctx, instanceworker.VerifyOptions{Store: st, ES: es, IndexPrefix: cfg.Elasticsearch.IndexPrefix,
				DB: db, Class: class, IndexVersion: version, Concurrency: max(concurrency, 1),
				Progress: func(_, total int64) {
					if !barMade {
						barMade = true
						bar = newProgress(cmd, total, fmt.Sprintf("verify %s/%s", db, class), "aggregates")
					}
					bar.add(1)
				}})
			bar.finish()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if err := writeVerifyJSON(out, *rep); err != nil {
					return err
				}
			} else {
				if len(rep.Problems) > 0 {
					tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "STATUS\tINSTANCE_ID\tSTORE_SEQ\tES_SEQ\tREASON")
					for _, p := range rep.Problems {
						fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", p.Status, p.InstanceID, p.StoreSeq, p.ESSeq, p.Reason)
					}
					_ = tw.Flush()
				}
				fmt.Fprintln(out, rep.Summary())
			}
			if len(rep.Problems) > 0 {
				return &exitError{code: exitVerifyDiffers, err: errors.New(rep.Summary())}
			}
			if rep.Instances == 0 {
				// Nothing on either side: a mistyped --db or --class would
				// otherwise read as a clean result.
				return &exitError{code: exitNotFound, err: fmt.Errorf("nothing to verify: neither the event store nor Elasticsearch holds an instance of db %q class %q (check --db and --class)", db, class)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&db, "db", "", "database name (required)")
	f.StringVar(&class, "class", "", "class name (required)")
	f.IntVar(&version, "index-version", 0, "instances index version to compare against (0: the live one, through the write alias)")
	f.IntVar(&concurrency, "concurrency", 8, "parallel event-store reads")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	_ = cmd.MarkFlagRequired("db")
	_ = cmd.MarkFlagRequired("class")
	return cmd
}

// opProgress prints a throttled progress bar (one line per update, so it
// reads well in logs too) to the operator's stderr.
type opProgress struct {
	mu      sync.Mutex
	w       io.Writer
	label   string
	unit    string
	total   int64
	n       int64
	last    time.Time
	every   time.Duration
	started time.Time
}

func newOpProgress(w io.Writer, label string, total int64, unit string) *opProgress {
	now := time.Now()
	return &opProgress{w: w, label: label, unit: unit, total: total, every: time.Second, last: now, started: now}
}

func (p *opProgress) add(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n += n
	if time.Since(p.last) >= p.every {
		p.print()
	}
}

func (p *opProgress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.print()
}

func (p *opProgress) print() {
	p.last = time.Now()
	elapsed := time.Since(p.started).Round(time.Millisecond)
	if p.total <= 0 {
		fmt.Fprintf(p.w, "%s: %d %s (%s)\n", p.label, p.n, p.unit, elapsed)
		return
	}
	const width = 30
	frac := min(float64(p.n)/float64(p.total), 1)
	filled := int(frac * width)
	fmt.Fprintf(p.w, "%s [%s%s] %d/%d %s %3.0f%% (%s)\n", p.label, strings.Repeat("#", filled), strings.Repeat(".", width-filled),
		p.n, p.total, p.unit, frac*100, elapsed)
}

// verifySummary is the --json output of `sluice verify`: the report with
// its run time in seconds as well, duration_seconds, like the other
// summaries' …_seconds (duration_ms stays for the scripts that read it).
type verifySummary struct {
	instanceworker.VerifyReport
	DurationSeconds float64 `json:"duration_seconds"`
}

// writeVerifyJSON prints rep as verifySummary, one indented JSON document.
func writeVerifyJSON(w io.Writer, rep instanceworker.VerifyReport) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(verifySummary{VerifyReport: rep, DurationSeconds: float64(rep.DurationMS) / 1000})
}
