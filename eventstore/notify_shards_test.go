package eventstore

import (
	"fmt"
	"testing"
)

// A notification of a store of several shards gives one Notification per
// shard's block; anything the store could not have sent is one Resync.
func TestParseNotificationsOfShards(t *testing.T) {
	resync := []Notification{{}}
	for _, c := range []struct {
		payload string
		want    []Notification
	}{
		{"committed 17 42", []Notification{{Kind: Committed, First: 17, Last: 42}}},
		{"committed 0:1-3", []Notification{{Kind: Committed, Shard: 0, First: 1, Last: 3}}},
		{"committed 0:1-3 2:5-5 3:9-12", []Notification{{Kind: Committed, Shard: 0, First: 1, Last: 3},
			{Kind: Committed, Shard: 2, First: 5, Last: 5}, {Kind: Committed, Shard: 3, First: 9, Last: 12}}},
		{"reserved 1:4-6", []Notification{{Kind: Reserved, Shard: 1, First: 4, Last: 6}}},
		{"abandoned 3:2-2", []Notification{{Kind: Abandoned, Shard: 3, First: 2, Last: 2}}},
		{"committed 4:1-1", resync},        // no shard 4 in a store of 4
		{"committed 1:1-1 1:2-2", resync},  // a shard twice
		{"committed 1:3-2", resync},        // last below first
		{"committed 1:0-2", resync},        // position 0
		{"committed -1:1-2", resync},       // negative shard
		{"committed 1:1-2 x", resync},      // a word that is no block
		{"published 1:1-2", resync},        // unknown word
		{"committed 1:1-2  2:1-1", resync}, // an empty block
		{"committed 1:a-2", resync},        // not a number
		{"", resync},
	} {
		t.Run(c.payload, func(t *testing.T) {
			if got := parseNotifications(c.payload, 4); fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("parseNotifications(%q) = %+v, want %+v", c.payload, got, c.want)
			}
		})
	}
	t.Run("what the store sends reads back", func(t *testing.T) {
		blocks := []shardBlock{{shard: 0, first: 1, last: 2}, {shard: 3, first: 7, last: 9}}
		got := parseNotifications(blockNotify(stateCommitted, 4, blocks), 4)
		want := []Notification{{Kind: Committed, Shard: 0, First: 1, Last: 2}, {Kind: Committed, Shard: 3, First: 7, Last: 9}}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("got %+v", got)
		}
	})
}
