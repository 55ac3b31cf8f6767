package pipelinebench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluicehq/sluice/esserver"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/shared/config"
	"github.com/sluicehq/sluice/shared/observability"
)

// The roles the test binary plays when re-executed (TestMain).
const (
	roleKafka = "kafka"
	roleES    = "elasticsearch"
)

// sluiceRuntime gives a role the Go runtime settings of a sluice process:
// `sluice dev` runs the embedded Kafka and Elasticsearch server inside its
// own process, under sluice's GOGC (400 unless set, cmd/sluice
// applyRuntime), not the Go runtime's 100 — which cost the server a
// quarter of its CPU in collections of its heap of documents.
func sluiceRuntime() {
	var rt observability.RuntimeConfig
	if err := config.Parse(&rt, config.EnvironOS()); err != nil {
		fmt.Fprintln(os.Stderr, "pipelinebench role:", err)
		os.Exit(2)
	}
	debug.SetGCPercent(rt.GCPercent())
}

// serveKafka runs a one-broker kfake cluster on addr with its log in dir,
// as `sluice dev` runs its embedded Kafka, until SIGTERM.
func serveKafka(addr, dir string) int {
	host, portS, err := net.SplitHostPort(addr)
	port, perr := strconv.Atoi(portS)
	if err != nil || perr != nil {
		fmt.Fprintf(os.Stderr, "kafka role: address %q: %v %v\n", addr, err, perr)
		return 2
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			return net.Listen(network, net.JoinHostPort(host, portS))
		}),
		kfake.DataDir(dir), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(3))
	if err != nil {
		fmt.Fprintln(os.Stderr, "kafka role:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	<-ctx.Done()
	c.Close()
	return 0
}

// serveES runs the Elasticsearch test server on addr with its data in dir,
// as `sluice dev` does, until SIGTERM. Every instance document write it
// answers with success is printed on stdout as "W <_id> <version>
// <unix nanoseconds of the answer>" (esserver.WriteLog): the benchmark
// reads them to know when each command's document became readable. The
// lines are written through a buffer flushed every 20 ms; the time in a
// line is the answer's, so the delay of the flush is not measured.
func serveES(addr, dir string) int {
	srv, err := esserver.Open(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "elasticsearch role:", err)
		return 1
	}
	var mu sync.Mutex
	out := bufio.NewWriterSize(os.Stdout, 1<<16)
	log := esserver.NewWriteLog(func(w esserver.Write) {
		if !w.OK() || !strings.Contains(w.Index, "_"+readmodel.Projection) {
			return
		}
		mu.Lock()
		fmt.Fprintf(out, "W %s %d %d\n", w.ID, w.Version, w.At.UnixNano())
		mu.Unlock()
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "elasticsearch role:", err)
		return 1
	}
	hs := &http.Server{Handler: log.Wrap(srv), ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			mu.Lock()
			_ = out.Flush()
			mu.Unlock()
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "elasticsearch role:", err)
		return 1
	}
	_ = srv.Close()
	mu.Lock()
	_ = out.Flush()
	mu.Unlock()
	return 0
}
