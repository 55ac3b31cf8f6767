package admin

import (
	"sync"
	"testing"
	"time"
)

// Of requests racing to start a job of one projection, one starts it and
// the others are refused (409), until it ends; another projection's job
// is not held up.
func TestJobsStartOnePerProjection(t *testing.T) {
	tests := []struct {
		name     string
		racers   int
		other    string
		wantJobs int
	}{
		{"two at once", 2, "", 1},
		{"many at once", 32, "", 1},
		{"another projection", 8, "instances", 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := newJobs()
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range tc.racers {
				wg.Go(func() {
					<-start
					j.start("rebuild", "history", 2)
				})
			}
			close(start)
			wg.Wait()
			if tc.other != "" && j.start("rebuild", tc.other, 2) == nil {
				t.Fatalf("a job of %s was refused", tc.other)
			}
			if got := len(j.list()); got != tc.wantJobs {
				t.Fatalf("%d jobs started, want %d", got, tc.wantJobs)
			}
			for _, job := range j.byID {
				job.EndedAt = time.Now()
			}
			if j.start("rollback", "history", 0) == nil {
				t.Fatal("a job after the last ended was refused")
			}
		})
	}
}
