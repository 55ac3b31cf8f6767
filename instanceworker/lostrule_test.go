package instanceworker_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/shared/envelope"
)

// TestShortIndex: the rule that decides a db's instances index was lost.
func TestShortIndex(t *testing.T) {
	for _, tc := range []struct {
		want, docs int64
		exists     bool
		lost       bool
	}{
		{0, 0, false, false},   // nothing in the store: a fresh db
		{0, 5, true, false},    // documents the store does not know: verify's "extra"
		{10, 0, false, true},   // the write alias is gone
		{10, 0, true, true},    // empty
		{100, 90, true, false}, // 10% missing: a crash's unwritten documents, stale ones
		{100, 89, true, true},  // more than 10% missing
		{20, 18, true, false},
		{20, 17, true, true},
		{3, 2, true, true},
		{100, 120, true, false},
	} {
		lost, why := instanceworker.ShortIndex(tc.want, tc.docs, tc.exists)
		if lost != tc.lost || (lost && why == "") {
			t.Errorf("ShortIndex(%d, %d, %t) = %t %q, want %t", tc.want, tc.docs, tc.exists, lost, why, tc.lost)
		}
	}
}

// TestStoreReadsForRebuild: Streams reads the domain streams of many
// aggregates in one call, each in slot order at the index of its id;
// CountAggregatesByPart counts, per db, the instances with a domain event
// (an aggregate with commands only is no instance).
func TestStoreReadsForRebuild(t *testing.T) {
	f := newVerifyFixture(t)
	ctx := context.Background()
	f.event(t, envelope.KindDomain, instanceworker.InstanceCreated, "shop:orders:1", `{"a":1}`)
	f.event(t, envelope.KindDomain, instanceworker.InstanceUpdated, "shop:orders:1", `{"a":2}`)
	f.event(t, envelope.KindDomain, instanceworker.InstanceCreated, "shop:orders:2", `{"b":1}`)
	f.event(t, envelope.KindDomain, instanceworker.InstanceDeleted, "shop:orders:2", `{}`)
	f.event(t, envelope.KindCommand, instanceworker.CreateInstance, "shop:orders:3", `{"db":"shop","class":"orders","data":{}}`)
	f.event(t, envelope.KindDomain, instanceworker.InstanceCreated, "crm:people:1", `{"c":1}`)

	streams, err := f.st.Streams(ctx, envelope.AggregateTypeInstance, []string{"shop:orders:2", "shop:orders:3", "shop:orders:1"}, envelope.KindDomain)
	if err != nil {
		t.Fatal(err)
	}
	types := func(i int) []string {
		var out []string
		for _, ev := range streams[i] {
			out = append(out, ev.Envelope.EventType)
		}
		return out
	}
	if len(streams) != 3 || len(streams[0]) != 2 || len(streams[1]) != 0 || len(streams[2]) != 2 ||
		streams[0][1].Envelope.EventType != instanceworker.InstanceDeleted || string(streams[2][1].Envelope.Data) != `{"a":2}` {
		t.Fatalf("streams: %v %v %v", types(0), types(1), types(2))
	}
	counts, err := f.st.CountAggregatesByPart(ctx, envelope.AggregateTypeInstance, ":", envelope.KindDomain)
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) != 2 || counts["shop"] != 2 || counts["crm"] != 1 {
		t.Fatalf("counts %v, want shop 2, crm 1", counts)
	}
	// The start-up check's sample: instances with a domain event only, at
	// most n of them.
	for _, tc := range []struct {
		name string
		n    int
		want int
	}{{"the whole small store", 10, 3}, {"bounded by n", 2, 2}, {"none asked", 0, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			ids, err := f.st.SampleAggregates(ctx, envelope.AggregateTypeInstance, envelope.KindDomain, tc.n)
			if err != nil {
				t.Fatal(err)
			}
			if len(ids) != tc.want {
				t.Fatalf("sample %v, want %d ids", ids, tc.want)
			}
			for _, id := range ids {
				if id != "shop:orders:1" && id != "shop:orders:2" && id != "crm:people:1" {
					t.Fatalf("sample %v holds %q, which has no domain event", ids, id)
				}
			}
		})
	}
}
