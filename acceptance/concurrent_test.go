package acceptance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// spread reports whether group has n members and each owns at least one
// partition of topic.
func (p *pipeline) spread(group, topic string, n int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dg, err := kadm.NewClient(p.kcl).DescribeGroups(ctx, group)
	if err != nil {
		return false
	}
	g := dg[group]
	if g.State != "Stable" || len(g.Members) != n {
		return false
	}
	for _, m := range g.Members {
		ca, ok := m.Assigned.AsConsumer()
		if !ok {
			return false
		}
		owned := 0
		for _, tp := range ca.Topics {
			if tp.Topic == topic {
				owned += len(tp.Partitions)
			}
		}
		if owned == 0 {
			return false
		}
	}
	return true
}

// TestSameEventToTwoConsumersOneEffect is scenario 5: two instance-worker
// processes and two projection-worker processes (one group each, one
// partition per process) receive every command and every domain event at
// the same time — each record is produced to both partitions — and then a
// third time from the relay. Only one claim per (handler, event_id)
// succeeds: one attempt per registry row, one domain event per command,
// each document version written once, and the workers' metrics show the
// other copies finished as duplicates.
func TestSameEventToTwoConsumersOneEffect(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, setup{partitions: 2})
	p.startDefault("relay", "instance-worker", "projection-worker")
	var workers []*service
	for _, n := range []string{"a", "b"} {
		iw := p.add("instance-worker-"+n, kindInstance, nil)
		pw := p.add("projection-worker-"+n, kindProjection, nil)
		iw.evictGroup, pw.evictGroup = "", "" // two members per group: never evict
		workers = append(workers, iw, pw)
	}
	for _, w := range workers {
		w.start()
	}
	for _, w := range workers {
		w.waitReady(90 * time.Second)
	}
	waitFor(t, 60*time.Second, "both instance workers own a partition", func() bool { return p.spread(instanceGroup, commandsTopic, 2) })
	waitFor(t, 60*time.Second, "both projection workers own a partition", func() bool { return p.spread(historyGroup, eventsTopic, 2) })

	exp := expectation{db: "twice", class: "orders", faultFree: true}
	for i := range 4 {
		id := fmt.Sprintf("o-%d", i)
		p.create(exp.db, exp.class, id, map[string]any{"qty": i})
		p.patch(exp.db, exp.class, id, map[string]any{"qty": i + 1})
		p.patch(exp.db, exp.class, id, map[string]any{"paid": true})
		exp.instances++
		exp.applied += 3
	}
	p.del(exp.db, exp.class, "o-3")
	exp.applied++
	p.create(exp.db, exp.class, "o-0", map[string]any{"qty": 9}) // rejected: exists
	exp.rejected++

	prod, err := kgo.NewClient(kgo.SeedBrokers(p.kafka.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	both := func(topic string, recs []storeRecord) {
		var krs []*kgo.Record
		for _, r := range recs {
			for part := range int32(2) {
				krs = append(krs, &kgo.Record{Topic: topic, Partition: part, Key: r.Key, Value: r.Raw})
			}
		}
		p.produce(prod, krs...)
	}
	cmds := p.storeCat("--from", "1")
	both(commandsTopic, cmds)
	waitFor(t, 90*time.Second, "commands finished", func() bool {
		n, err := p.unfinished("command", instanceHandler)
		return err == nil && n == 0
	})
	var doms []storeRecord
	for _, r := range p.storeCat("--from", "1") {
		if r.Kind == "domain" {
			doms = append(doms, r)
		}
	}
	if len(doms) != exp.applied {
		t.Fatalf("%d domain events, want %d", len(doms), exp.applied)
	}
	both(eventsTopic, doms)
	waitFor(t, 90*time.Second, "events finished", func() bool {
		n, err := p.unfinished("domain", historyHandler)
		return err == nil && n == 0
	})
	p.service("relay").start() // a third copy of everything, in order
	waitFor(t, 60*time.Second, "the relay published the log", func() bool {
		return p.records(commandsTopic) >= int64(3*len(cmds)) && p.records(eventsTopic) >= int64(3*len(doms))
	})
	p.waitDrained(90 * time.Second)
	p.checkEndState(exp)
	for _, h := range []string{instanceHandler, historyHandler} {
		for _, r := range p.registry(h, exp.db+":") {
			if r.Attempts != 1 {
				t.Errorf("%s: %s claimed %d times", h, r.EventID, r.Attempts)
			}
		}
	}
	// Every record was delivered three times; one delivery per event made
	// the effect, the others finished as duplicates (or stale, for events
	// whose aggregate moved on), in both processes.
	for _, kind := range []string{"instance-worker", "projection-worker"} {
		var effects, dups float64
		for _, n := range []string{"a", "b"} {
			s := p.service(kind + "-" + n)
			effects += s.metric("sluice_worker_records_total", `outcome="applied"`) + s.metric("sluice_worker_records_total", `outcome="rejected"`)
			dups += s.metric("sluice_worker_records_total", `outcome="duplicate"`) + s.metric("sluice_worker_records_total", `outcome="stale"`)
		}
		want := float64(len(cmds))
		if kind == "projection-worker" {
			want = float64(len(doms))
		}
		if effects != want || dups != 2*want {
			t.Errorf("%s: %v effects and %v duplicates over both processes, want %v and %v", kind, effects, dups, want, 2*want)
		}
	}
}
