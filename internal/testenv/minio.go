package testenv

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// MinIOModule is the pinned MinIO server module built for the tests.
const MinIOModule = "github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c"

// CacheDir is where built tools are kept between runs:
// $SLUICE_CACHE_DIR, else $XDG_CACHE_HOME/sluice, else ~/.cache/sluice.
func CacheDir() string {
	if d := os.Getenv("SLUICE_CACHE_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "sluice")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "sluice-cache")
	}
	return filepath.Join(home, ".cache", "sluice")
}

// MinIOBinary returns the path of the pinned MinIO server, building it with
// `go install` into the cache directory the first time (a few minutes). A
// file lock keeps concurrent test packages from building it twice.
func MinIOBinary(ctx context.Context) (string, error) {
	if b := os.Getenv("SLUICE_MINIO_BIN"); b != "" {
		return b, nil
	}
	_, version, _ := strings.Cut(MinIOModule, "@")
	dir := filepath.Join(CacheDir(), "minio", version)
	bin := filepath.Join(dir, "minio")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("testenv: cache dir: %w", err)
	}
	lf, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("testenv: lock: %w", err)
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("testenv: lock: %w", err)
	}
	defer func() { _ = syscall.Flock(int(lf.Fd()), syscall.LOCK_UN) }()
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	cmd := exec.CommandContext(ctx, "go", "install", MinIOModule)
	cmd.Env = append(os.Environ(), "GOBIN="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("testenv: go install %s: %w\n%s", MinIOModule, err, out)
	}
	return bin, nil
}

// tmpfsMagic is the f_type statfs reports for a tmpfs.
const tmpfsMagic = 0x01021994

// MinIODataParent is the folder in which each MinIO server of the tests gets
// its data folder: $SLUICE_MINIO_DATA_DIR when set (a disk path, to measure
// MinIO on a real drive), else /dev/shm when it is a tmpfs with at least
// 1 GiB free, else the temporary directory.
//
// Why tmpfs by default: MinIO creates and removes a temporary directory for
// every PUT, and on an ext4 without a journal — the root file system of the
// development and CI machines — every inode allocation then scans the
// inodes freed in the last seconds (recently_deleted in the kernel's
// find_inode_bit): perf showed 35–43 % of MinIO's CPU there, and a
// segment PUT took 6–21 ms instead of 2 ms, growing with the run's length.
// That is a property of the machine's file system, not of MinIO on the
// XFS drives it recommends, and it made every timing of the tests and
// benchmarks depend on how much the machine had written in the last
// seconds (docs/benchmarks.md). Postgres, which carries the durability of
// a reservation and a commit, stays on its disk.
func MinIODataParent() string {
	if d := os.Getenv("SLUICE_MINIO_DATA_DIR"); d != "" {
		return d
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &st); err == nil && int64(st.Type) == tmpfsMagic &&
		st.Bavail*uint64(st.Bsize) >= 1<<30 {
		return "/dev/shm"
	}
	return os.TempDir()
}

// MinIO is a MinIO server process on a loopback port (or an external S3
// endpoint when SLUICE_TEST_S3_ENDPOINT is set).
type MinIO struct {
	Endpoint  string // http://127.0.0.1:PORT
	AccessKey string
	SecretKey string

	bin, dir, addr string
	cmd            *exec.Cmd
	exited         chan struct{}
}

// StartMinIO starts a MinIO server with its data in a new temporary folder.
// Close stops it and removes the folder.
func StartMinIO(ctx context.Context) (*MinIO, error) {
	if ep := os.Getenv("SLUICE_TEST_S3_ENDPOINT"); ep != "" {
		return &MinIO{Endpoint: ep, AccessKey: os.Getenv("SLUICE_TEST_S3_ACCESS_KEY"), SecretKey: os.Getenv("SLUICE_TEST_S3_SECRET_KEY")}, nil
	}
	bin, err := MinIOBinary(ctx)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(MinIODataParent(), "sluice-minio-")
	if err != nil {
		return nil, fmt.Errorf("testenv: minio dir: %w", err)
	}
	m := &MinIO{AccessKey: "sluice-test", SecretKey: "sluice-test-secret", bin: bin, dir: dir}
	var lastErr error
	for range 3 { // a free port can be taken between probe and bind: retry
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		m.addr = fmt.Sprintf("127.0.0.1:%d", port)
		m.Endpoint = "http://" + m.addr
		if lastErr = m.start(ctx); lastErr == nil {
			return m, nil
		}
	}
	_ = os.RemoveAll(dir)
	return nil, lastErr
}

// freePort returns a port on 127.0.0.1 that was free a moment ago. It is
// drawn at random from outside the kernel's ephemeral range: a port the
// kernel handed out for ":0" and took back is soon handed out again — to
// another test's listener or as the source port of any outgoing
// connection — so the window between this probe and the caller's bind was
// a real race when test packages run in parallel (seen in CI: a service
// of the acceptance suite found its port taken and another process
// answered on it). Outside the ephemeral range only explicit binds take
// ports. A port is handed out once per process (callers often draw
// several before binding any). Falls back to ":0".
func freePort() (int, error) {
	lo, hi := portRange()
	for range 64 {
		if hi <= lo {
			break
		}
		port := lo + rand.IntN(hi-lo)
		if !handedOut.claim(port) {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // taken: draw again
		}
		_ = l.Close()
		return port, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("testenv: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// portSet is the set of ports freePort handed out in this process. Ports
// are a process-wide (indeed host-wide) resource, hence one set per
// process: the only package-level state of testenv.
type portSet struct {
	mu   sync.Mutex
	used map[int]bool
}

var handedOut = &portSet{used: map[int]bool{}}

// claim reports whether port was not handed out before, and marks it.
func (s *portSet) claim(port int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used[port] {
		return false
	}
	s.used[port] = true
	return true
}

// portRange is the range freePort draws from: the larger of 20000 up to the
// start of the kernel's ephemeral range (net.ipv4.ip_local_port_range;
// 32768–60999 when it cannot be read) and the ports above its end.
func portRange() (lo, hi int) {
	elo, ehi := 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			a, errA := strconv.Atoi(f[0])
			z, errZ := strconv.Atoi(f[1])
			if errA == nil && errZ == nil && a <= z {
				elo, ehi = a, z
			}
		}
	}
	below, above := elo-20000, 65535-ehi
	if below >= above {
		return 20000, elo
	}
	return ehi + 1, 65536
}

func (m *MinIO) start(ctx context.Context) error {
	consolePort, err := freePort()
	if err != nil {
		return err
	}
	cmd := exec.Command(m.bin, "server", "--quiet", "--address", m.addr,
		"--console-address", fmt.Sprintf("127.0.0.1:%d", consolePort), m.dir)
	cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+m.AccessKey, "MINIO_ROOT_PASSWORD="+m.SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CI_CD=1")
	logf, err := os.Create(filepath.Join(os.TempDir(), "sluice-minio-"+filepath.Base(m.dir)+".log"))
	if err == nil {
		cmd.Stdout, cmd.Stderr = logf, logf
		defer logf.Close()
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("testenv: start minio: %w", err)
	}
	m.cmd = cmd
	m.exited = make(chan struct{})
	go func() { _ = cmd.Wait(); close(m.exited) }()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-m.exited:
			return fmt.Errorf("testenv: minio exited at start-up (see %s)", logf.Name())
		case <-ctx.Done():
			m.stop()
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		resp, err := http.Get(m.Endpoint + "/minio/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
	m.stop()
	return errors.New("testenv: minio not ready after 60s")
}

func (m *MinIO) stop() {
	if m.cmd == nil {
		return
	}
	_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
	<-m.exited
	m.cmd = nil
}

// Stop kills the server and keeps its data, for outage tests; Restart brings
// it back on the same address with the same data.
func (m *MinIO) Stop() { m.stop() }

// Restart starts a stopped server again on the same address.
func (m *MinIO) Restart(ctx context.Context) error {
	if m.bin == "" {
		return errors.New("testenv: cannot restart an external S3 endpoint")
	}
	m.stop()
	return m.start(ctx)
}

// Close stops the server and removes its data.
func (m *MinIO) Close() {
	m.stop()
	if m.dir != "" {
		_ = os.RemoveAll(m.dir)
	}
}

// DataDir returns the folder holding the server's data ("" for an
// external endpoint).
func (m *MinIO) DataDir() string { return m.dir }

// Client returns a minio-go client for the server.
func (m *MinIO) Client() (*minio.Client, error) {
	host := strings.TrimPrefix(strings.TrimPrefix(m.Endpoint, "http://"), "https://")
	c, err := minio.New(host, &minio.Options{
		Creds:  credentials.NewStaticV4(m.AccessKey, m.SecretKey, ""),
		Secure: strings.HasPrefix(m.Endpoint, "https://"),
	})
	if err != nil {
		return nil, fmt.Errorf("testenv: minio client: %w", err)
	}
	return c, nil
}

// NewBucket creates a bucket with a unique name for one test.
func (m *MinIO) NewBucket(t testing.TB) string {
	t.Helper()
	c, err := m.Client()
	if err != nil {
		t.Fatal(err)
	}
	name := "sluice-test-" + RandomSuffix(12)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.MakeBucket(ctx, name, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("testenv: MinIO at %s did not create bucket %s: %v", m.Endpoint, name, err)
	}
	return name
}

// RunWithMinIO is a TestMain helper: it starts MinIO, hands it to set, runs
// the package's tests and stops the server. A MinIO that cannot start fails
// the whole package (exit code 1) instead of skipping.
func RunWithMinIO(m *testing.M, set func(*MinIO)) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	mi, err := StartMinIO(ctx)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv: MinIO is required by these tests:", err)
		return 1
	}
	set(mi)
	defer mi.Close()
	return m.Run()
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}
