package eventstore

import (
	"sync/atomic"
	"time"
)

// stageStats accumulates the time a Store's groups spend in each step of
// the append protocol. They are per Store, cheap (a few atomic adds per
// group), and read by the benchmark to say where an append's time goes.
type stageStats struct {
	groups   atomic.Int64 // groups that reserved at least one envelope
	events   atomic.Int64 // envelopes in those groups
	gather   atomic.Int64 // ns from the oldest item's arrival to the group's start
	reserve  atomic.Int64 // ns in the reservation transaction
	put      atomic.Int64 // ns in the segment's conditional create
	commit   atomic.Int64 // ns in the commit statement
	inFlight atomic.Int64 // sum over groups of the groups in flight when it started
	lookups  atomic.Int64 // reservation attempts that read their facts (a round trip more)
	waited   atomic.Int64 // items requeued to wait for another writer's live reservation
}

// stageSnapshot is a copy of stageStats.
type stageSnapshot struct {
	groups, events, lookups                int64
	gather, reserve, put, commit, inFlight time.Duration
}

func (st *stageStats) snapshot() stageSnapshot {
	return stageSnapshot{
		groups: st.groups.Load(), events: st.events.Load(), lookups: st.lookups.Load(),
		gather: time.Duration(st.gather.Load()), reserve: time.Duration(st.reserve.Load()),
		put: time.Duration(st.put.Load()), commit: time.Duration(st.commit.Load()),
		inFlight: time.Duration(st.inFlight.Load()),
	}
}

func (a stageSnapshot) sub(b stageSnapshot) stageSnapshot {
	return stageSnapshot{
		groups: a.groups - b.groups, events: a.events - b.events, lookups: a.lookups - b.lookups,
		gather: a.gather - b.gather, reserve: a.reserve - b.reserve,
		put: a.put - b.put, commit: a.commit - b.commit, inFlight: a.inFlight - b.inFlight,
	}
}
