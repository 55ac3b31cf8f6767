package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
)

var sluiceBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-deploy-test-")
	if err != nil {
		panic(err)
	}
	sluiceBin = filepath.Join(dir, "sluice")
	if out, err := exec.Command("go", "build", "-o", sluiceBin, "../cmd/sluice").CombinedOutput(); err != nil {
		os.Stderr.Write(out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// checkCommand fails unless `sluice <subcommand path>` exists in the binary.
func checkCommand(t *testing.T, where string, args []string) {
	t.Helper()
	var path []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			break
		}
		path = append(path, a)
	}
	if len(path) == 0 {
		t.Errorf("%s: runs sluice with no subcommand: %v", where, args)
		return
	}
	out, err := exec.Command(sluiceBin, append(path, "--help")...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "sluice "+strings.Join(path, " ")) {
		t.Errorf("%s: `sluice %s` is not a command of the binary: %v\n%s", where, strings.Join(path, " "), err, out)
	}
}

// checkEnv fails unless every variable is one sluice reads and the set as a
// whole passes `sluice config check` (sluiceconfig.Check: start-up validation,
// DATABASE_URL set and valid, no typo of a known name).
func checkEnv(t *testing.T, where string, env map[string]string) {
	t.Helper()
	known := map[string]bool{}
	for _, v := range sluiceconfig.Vars() {
		known[v.Key] = true
	}
	for k := range env {
		if !known[k] {
			t.Errorf("%s: sets %s, which sluice does not read (typo?)", where, k)
		}
	}
	if _, err := sluiceconfig.Check(env); err != nil {
		t.Errorf("%s: configuration is refused by sluice config check: %v", where, err)
	}
}

// localImage is the image built from this checkout (compose's build:, the
// dev overlay's kind load with imagePullPolicy Never): never pulled, so its
// tag cannot float.
const localImage = "sluice:dev"

var (
	digestRef    = regexp.MustCompile(`@sha256:[0-9a-f]{64}$`)
	exactVersion = regexp.MustCompile(`^v?[0-9]+\.[0-9]+\.[0-9]+([-+.][0-9A-Za-z.-]+)?$`)
	minioRelease = regexp.MustCompile(`^RELEASE\.[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}-[0-9]{2}-[0-9]{2}Z$`)
	// Postgres (10 and later) releases are major.minor: 15.14 is exact.
	twoPartRelease = regexp.MustCompile(`^[0-9]+\.[0-9]+(-[a-z0-9]+)?$`)
)

// imageNotPinned says why ref is not pinned to one exact release (no tag,
// latest, a floating major or minor tag like postgres:15 or golang:1.26),
// or "" when it is: a digest, or a tag naming an exact version.
func imageNotPinned(ref string) string {
	if digestRef.MatchString(ref) {
		return ""
	}
	name, tag := ref, ""
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		name, tag = ref[:i], ref[i+1:]
	}
	base := name[strings.LastIndex(name, "/")+1:]
	switch {
	case tag == "":
		return "has no tag (that is latest)"
	case tag == "latest":
		return "is latest"
	case exactVersion.MatchString(tag), minioRelease.MatchString(tag):
		return ""
	case base == "postgres" && twoPartRelease.MatchString(tag):
		return ""
	}
	return fmt.Sprintf("tag %q is not an exact release (major.minor.patch, a dated release or a digest)", tag)
}

func TestImageNotPinned(t *testing.T) {
	for _, tc := range []struct {
		ref    string
		pinned bool
	}{
		{"postgres:15.14", true}, {"postgres:15", false}, {"apache/kafka:3.9.1", true},
		{"apache/kafka:3.9", false}, {"golang:1.26.8-bookworm", true}, {"golang:1.26-bookworm", false},
		{"gcr.io/distroless/static-debian12:nonroot", false},
		{"gcr.io/distroless/static-debian12:nonroot@sha256:afa5c872c891853ca7fcf1f12c3edb23f7eeef36189728842dd51042ff57f7ab", true},
		{"ghcr.io/sluicehq/sluice:latest", false}, {"ghcr.io/sluicehq/sluice", false}, {"ghcr.io/sluicehq/sluice:0.1.0", true},
		{"localhost:5000/sluice", false}, {"minio/minio:RELEASE.2025-09-07T16-13-09Z", true},
		{"docker.elastic.co/elasticsearch/elasticsearch:8.15.0", true}, {"docker.elastic.co/elasticsearch/elasticsearch:8", false},
	} {
		if got := imageNotPinned(tc.ref) == ""; got != tc.pinned {
			t.Errorf("%s: pinned = %v, want %v (%s)", tc.ref, got, tc.pinned, imageNotPinned(tc.ref))
		}
	}
}

// composeFile is the single-machine compose file; composeScaleFile the
// override that scales it out (scale_test.go).
const (
	composeFile      = "docker-compose.yml"
	composeScaleFile = "docker-compose.scale.yml"
)

// loadCompose loads files, each overriding the ones before it, with the
// Compose Specification's loader (the merge `docker compose -f a -f b`
// does), and validates the result.
func loadCompose(t *testing.T, files ...string) *types.Project {
	t.Helper()
	if len(files) == 0 {
		files = []string{composeFile}
	}
	var configs []types.ConfigFile
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		configs = append(configs, types.ConfigFile{Filename: f, Content: body})
	}
	project, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  ".",
		ConfigFiles: configs,
		Environment: types.Mapping{},
	}, func(o *loader.Options) {
		if len(files) == 1 {
			o.SetProjectName("sluice", true)
		}
	})
	if err != nil {
		t.Fatalf("compose files %v do not load and validate: %v", files, err)
	}
	return project
}

// oneShot reports whether a compose service runs to completion (the
// migration, the bucket creation): it restarts never and has no health
// check; what needs it waits for service_completed_successfully.
func oneShot(svc types.ServiceConfig) bool {
	return svc.Restart == "no" && (svc.HealthCheck == nil || svc.HealthCheck.Disable)
}

func TestComposeFile(t *testing.T) {
	checkComposeProject(t, loadCompose(t))
}

// checkComposeProject checks a loaded compose project: pinned images,
// health checks and waits, every sluice command and environment, and each
// store's data in a named volume where it writes.
func checkComposeProject(t *testing.T, project *types.Project) {
	t.Helper()
	sluiceServices := 0
	for name, svc := range project.Services {
		where := "compose service " + name
		// Every image is an exact release, except sluice's own, built here.
		if svc.Image == localImage {
			if svc.Build == nil || svc.Build.Dockerfile != "deploy/Dockerfile" {
				t.Errorf("%s: %s must be built from deploy/Dockerfile", where, localImage)
			}
		} else if why := imageNotPinned(svc.Image); why != "" {
			t.Errorf("%s: image %s %s", where, svc.Image, why)
		}
		// Every long-running service has a health check; every dependency
		// is waited for: healthy, or completed for a one-shot.
		if !oneShot(svc) && (svc.HealthCheck == nil || svc.HealthCheck.Disable || len(svc.HealthCheck.Test) == 0) {
			t.Errorf("%s: no health check", where)
		}
		for dep, d := range svc.DependsOn {
			target, ok := project.Services[dep]
			want := types.ServiceConditionHealthy
			if ok && oneShot(target) {
				want = types.ServiceConditionCompletedSuccessfully
			}
			if d.Condition != want {
				t.Errorf("%s: depends on %s with condition %q, want %q", where, dep, d.Condition, want)
			}
		}
		if svc.Image != localImage {
			continue
		}
		sluiceServices++
		checkCommand(t, where, svc.Command)
		env := map[string]string{}
		for k, v := range svc.Environment {
			if v == nil {
				t.Errorf("%s: %s has no value", where, k)
				continue
			}
			env[k] = *v
		}
		checkEnv(t, where, env)
	}
	if sluiceServices == 0 {
		t.Fatal("no sluice service in the compose file")
	}

	// The pipeline waits for what each service talks to.
	needs := map[string][]string{
		"migrate":           {"postgres"},
		"api":               {"postgres", "minio", "migrate", "minio-bucket"},
		"relay":             {"postgres", "minio", "migrate", "minio-bucket", "kafka"},
		"instance-worker":   {"postgres", "minio", "migrate", "minio-bucket", "kafka", "elasticsearch"},
		"projection-worker": {"postgres", "migrate", "kafka", "elasticsearch"},
		"minio-bucket":      {"minio"},
	}
	for name, deps := range needs {
		svc, ok := project.Services[name]
		if !ok {
			t.Errorf("compose file lacks %s", name)
			continue
		}
		for _, dep := range deps {
			if _, ok := svc.DependsOn[dep]; !ok {
				t.Errorf("compose service %s does not wait for %s", name, dep)
			}
		}
	}
	for _, name := range []string{"migrate", "minio-bucket"} {
		if svc, ok := project.Services[name]; ok && !oneShot(svc) {
			t.Errorf("compose service %s must be a one-shot (restart: \"no\", no health check)", name)
		}
	}

	// Each store keeps its data in a named volume mounted where it writes.
	kafka := project.Services["kafka"]
	env := func(svc types.ServiceConfig, k string) string {
		if v := svc.Environment[k]; v != nil {
			return *v
		}
		return ""
	}
	if env(kafka, "CLUSTER_ID") == "" {
		t.Error("kafka: no fixed CLUSTER_ID: a recreated container would format new storage")
	}
	dataDirs := map[string]string{
		"minio":         "/data",
		"kafka":         env(kafka, "KAFKA_LOG_DIRS"),
		"elasticsearch": "/usr/share/elasticsearch/data",
	}
	if dataDirs["kafka"] == "" {
		t.Error("kafka: KAFKA_LOG_DIRS unset: the broker writes to /tmp/kraft-combined-logs, outside any volume")
	}
	// Every Postgres server (one, or one per role: scale_test.go).
	for name, svc := range project.Services {
		if !isPostgres(svc) {
			continue
		}
		dataDirs[name] = "/var/lib/postgresql/data"
		if pgdata := env(svc, "PGDATA"); pgdata != "" {
			dataDirs[name] = pgdata
		}
	}
	if _, ok := dataDirs["postgres"]; !ok {
		t.Error("compose file lacks the postgres service")
	}
	if !slices.Contains(project.Services["minio"].Command, dataDirs["minio"]) {
		t.Errorf("minio: command %v does not serve %s", project.Services["minio"].Command, dataDirs["minio"])
	}
	for name, dir := range dataDirs {
		svc := project.Services[name]
		persisted := false
		for _, v := range svc.Volumes {
			if v.Type == types.VolumeTypeVolume && dir != "" && (dir == v.Target || strings.HasPrefix(dir, v.Target+"/")) {
				if _, declared := project.Volumes[v.Source]; !declared {
					t.Errorf("%s: volume %s is not declared", name, v.Source)
				}
				persisted = true
			}
		}
		if !persisted {
			t.Errorf("%s writes to %q, which no named volume holds: its data is lost on down/up", name, dir)
		}
	}
}

// isPostgres reports whether a compose service is a Postgres server (the
// official image).
func isPostgres(svc types.ServiceConfig) bool {
	name := svc.Image
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name = name[:i]
	}
	return name == "postgres"
}

// commentedVar is a commented-out setting of the compose file's shared
// environment: "  # NAME: value".
var commentedVar = regexp.MustCompile(`(?m)^  # ([A-Z][A-Z0-9_]*): (\S+)$`)

// The compose file shows, commented out, how to put the store index and the
// registry on Postgres servers of their own (docs/scale-out.md): both
// variables are there, and uncommented they are variables sluice reads
// and a configuration `sluice config check` accepts.
func TestComposeRoleDatabases(t *testing.T) {
	body, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	project := loadCompose(t)
	env := map[string]string{}
	for k, v := range project.Services["api"].Environment {
		if v != nil {
			env[k] = *v
		}
	}
	commented := map[string]string{}
	for _, m := range commentedVar.FindAllStringSubmatch(string(body), -1) {
		commented[m[1]] = m[2]
		env[m[1]] = m[2]
	}
	for _, name := range []string{"EVENT_STORE_DATABASE_URL", "REGISTRY_DATABASE_URL"} {
		if _, ok := commented[name]; !ok {
			t.Errorf("the compose file does not show %s (commented out, beside DATABASE_URL)", name)
		}
	}
	checkEnv(t, "compose service api with the commented settings", env)
}

func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{"AS build", "CGO_ENABLED=0", "./cmd/sluice", `ENTRYPOINT ["/usr/local/bin/sluice"]`} {
		if !strings.Contains(s, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	froms := regexp.MustCompile(`(?m)^FROM\s+(\S+)`).FindAllStringSubmatch(s, -1)
	if len(froms) < 2 {
		t.Error("Dockerfile must be multi-stage")
	}
	for _, m := range froms {
		if why := imageNotPinned(m[1]); why != "" {
			t.Errorf("Dockerfile: FROM %s %s", m[1], why)
		}
	}
	// Numeric ids: Kubernetes cannot check runAsNonRoot against a name.
	users := regexp.MustCompile(`(?m)^USER\s+(\S+)`).FindAllStringSubmatch(s, -1)
	if len(users) == 0 || users[len(users)-1][1] != fmt.Sprintf("%d:%d", podUID, podUID) {
		t.Errorf("Dockerfile: final USER %v, want %d:%d (numeric, the pods' runAsUser/runAsGroup)", users, podUID, podUID)
	}
}

// The build context (the repository root) keeps VCS history, local state
// and credential files out of the daemon and every layer.
func TestDockerignore(t *testing.T) {
	b, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		lines[strings.TrimSpace(l)] = true
	}
	for _, want := range []string{".git", "**/.dev", "bin", "**/.env", "**/*.env", "**/*.pem", "**/*.key", "**/secrets"} {
		if !lines[want] {
			t.Errorf(".dockerignore lacks %q", want)
		}
	}
	// Nothing the build needs is excluded.
	for _, need := range []string{"go.mod", "go.sum", "cmd", "migrations", "api", "shared", "**/*.go", "**/*.sql", "**/*.json"} {
		if lines[need] || lines["/"+need] {
			t.Errorf(".dockerignore excludes %q, which the build needs", need)
		}
	}
}

// Every query of the Grafana dashboard is PromQL Prometheus' parser accepts,
// and every metric it reads is one sluice exports (declared with Name: "…"
// in the Go sources; histograms add _bucket/_sum/_count).
func TestGrafanaDashboardQueriesExportedMetrics(t *testing.T) {
	b, err := os.ReadFile("grafana/sluice-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard is not JSON: %v", err)
	}
	declared := map[string]bool{}
	nameRe := regexp.MustCompile(`Name:\s+"([a-z_:][a-z0-9_:]*)"`)
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin" || d.Name() == ".dev") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range nameRe.FindAllStringSubmatch(string(src), -1) {
			declared[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	metricRe := regexp.MustCompile(`\b((?:sluice|relay)_[a-z0-9_]+)\b`)
	promql := parser.NewParser(parser.Options{})
	queries := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			queries++
			if _, err := promql.ParseExpr(tg.Expr); err != nil {
				t.Errorf("panel %q: %s is not PromQL: %v", p.Title, tg.Expr, err)
			}
			for _, m := range metricRe.FindAllString(tg.Expr, -1) {
				base := m
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if strings.HasSuffix(m, suf) && declared[strings.TrimSuffix(m, suf)] {
						base = strings.TrimSuffix(m, suf)
					}
				}
				if !declared[base] {
					t.Errorf("panel %q queries %s, which no sluice code exports", p.Title, m)
				}
			}
		}
	}
	if queries == 0 {
		t.Fatal("dashboard has no queries")
	}
}
