package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/shared/config"
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
// whole passes the binary's start-up validation.
func checkEnv(t *testing.T, where string, env map[string]string) {
	t.Helper()
	known := map[string]bool{}
	for _, v := range config.Vars() {
		known[v.Key] = true
	}
	for k := range env {
		if !known[k] {
			t.Errorf("%s: sets %s, which sluice does not read (typo?)", where, k)
		}
	}
	if _, err := config.Load(env); err != nil {
		t.Errorf("%s: configuration is refused at start-up: %v", where, err)
	}
}

func TestComposeFile(t *testing.T) {
	ctx := context.Background()
	body, err := os.ReadFile("docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	project, err := loader.LoadWithContext(ctx, types.ConfigDetails{
		WorkingDir:  ".",
		ConfigFiles: []types.ConfigFile{{Filename: "docker-compose.yml", Content: body}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) { o.SetProjectName("sluice", true) })
	if err != nil {
		t.Fatalf("compose file does not load and validate: %v", err)
	}
	sluiceServices := 0
	for name, svc := range project.Services {
		if svc.Image != "sluice:dev" {
			continue
		}
		sluiceServices++
		where := "compose service " + name
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
		if svc.Build == nil || svc.Build.Dockerfile != "deploy/Dockerfile" {
			t.Errorf("%s: must build from deploy/Dockerfile", where)
		}
		for dep, d := range svc.DependsOn {
			if d.Condition != types.ServiceConditionHealthy && d.Condition != types.ServiceConditionCompletedSuccessfully {
				t.Errorf("%s: depends on %s without a health/completion condition (%q)", where, dep, d.Condition)
			}
		}
	}
	if sluiceServices == 0 {
		t.Fatal("no sluice service in the compose file")
	}
	for _, infra := range []string{"postgres", "minio", "kafka", "elasticsearch"} {
		svc, ok := project.Services[infra]
		if !ok {
			t.Errorf("compose file lacks %s", infra)
			continue
		}
		if svc.HealthCheck == nil || len(svc.HealthCheck.Test) == 0 {
			t.Errorf("%s has no health check", infra)
		}
	}
}

func TestKustomizations(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Fatalf("kubectl is needed to build the kustomizations: %v", err)
	}
	for _, dir := range []string{"k8s/base", "k8s/overlays/dev"} {
		t.Run(dir, func(t *testing.T) {
			out, err := exec.Command("kubectl", "kustomize", dir).Output()
			if err != nil {
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, ee.Stderr)
				}
				t.Fatal(err)
			}
			checkManifests(t, dir, out)
		})
	}
}

type manifest struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
	Spec       struct {
		Template struct {
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type podSpec struct {
	Containers []struct {
		Name    string   `yaml:"name"`
		Image   string   `yaml:"image"`
		Args    []string `yaml:"args"`
		EnvFrom []struct {
			ConfigMapRef *struct{ Name string } `yaml:"configMapRef"`
			SecretRef    *struct{ Name string } `yaml:"secretRef"`
		} `yaml:"envFrom"`
		Env []struct {
			Name  string `yaml:"name"`
			Value string `yaml:"value"`
		} `yaml:"env"`
		Resources struct {
			Requests map[string]string `yaml:"requests"`
		} `yaml:"resources"`
	} `yaml:"containers"`
	SecurityContext struct {
		RunAsNonRoot bool `yaml:"runAsNonRoot"`
	} `yaml:"securityContext"`
}

func checkManifests(t *testing.T, dir string, out []byte) {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(out))
	data := map[string]map[string]string{}
	var workloads []manifest
	for {
		var node yaml.Node
		if err := dec.Decode(&node); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("%s: decode: %v", dir, err)
		}
		raw, err := yaml.Marshal(&node)
		if err != nil {
			t.Fatal(err)
		}
		var m manifest
		if err := node.Decode(&m); err != nil {
			t.Fatalf("%s: decode: %v", dir, err)
		}
		strictDecode(t, dir, m.Kind, m.Metadata.Name, raw)
		switch m.Kind {
		case "ConfigMap":
			data["ConfigMap/"+m.Metadata.Name] = m.Data
		case "Secret":
			data["Secret/"+m.Metadata.Name] = m.StringData
		case "Deployment", "Job", "StatefulSet":
			workloads = append(workloads, m)
		}
	}
	if len(workloads) == 0 {
		t.Fatalf("%s: no workloads", dir)
	}
	for _, w := range workloads {
		pod := w.Spec.Template.Spec
		if !pod.SecurityContext.RunAsNonRoot {
			t.Errorf("%s %s/%s: pod must set runAsNonRoot", dir, w.Kind, w.Metadata.Name)
		}
		for _, c := range pod.Containers {
			where := dir + " " + w.Kind + "/" + w.Metadata.Name + " container " + c.Name
			if !strings.Contains(c.Image, "sluice") {
				continue
			}
			checkCommand(t, where, c.Args)
			if len(c.Resources.Requests) == 0 {
				t.Errorf("%s: no resource requests", where)
			}
			env := map[string]string{}
			for _, ef := range c.EnvFrom {
				var src map[string]string
				var ok bool
				switch {
				case ef.ConfigMapRef != nil:
					src, ok = data["ConfigMap/"+ef.ConfigMapRef.Name]
				case ef.SecretRef != nil:
					src, ok = data["Secret/"+ef.SecretRef.Name]
				}
				if !ok {
					t.Errorf("%s: envFrom names a ConfigMap/Secret the kustomization does not contain", where)
				}
				for k, v := range src {
					env[k] = v
				}
			}
			for _, e := range c.Env {
				env[e.Name] = e.Value
			}
			checkEnv(t, where, env)
		}
	}
}

func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{"AS build", "CGO_ENABLED=0", "./cmd/sluice", "USER nonroot", `ENTRYPOINT ["/usr/local/bin/sluice"]`} {
		if !strings.Contains(s, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	if strings.Count(s, "\nFROM ") < 2 {
		t.Error("Dockerfile must be multi-stage")
	}
}

// Every metric the Grafana dashboard queries is one sluice exports (declared
// with Name: "…" in the Go sources; histograms add _bucket/_sum/_count).
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
	queries := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			queries++
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

// strictDecode decodes one rendered object into its Kubernetes API type,
// refusing unknown or misspelt fields, as the API server would.
func strictDecode(t *testing.T, dir, kind, name string, raw []byte) {
	t.Helper()
	var obj any
	switch kind {
	case "Deployment":
		obj = &appsv1.Deployment{}
	case "Job":
		obj = &batchv1.Job{}
	case "ConfigMap":
		obj = &corev1.ConfigMap{}
	case "Secret":
		obj = &corev1.Secret{}
	case "Service":
		obj = &corev1.Service{}
	case "Namespace":
		obj = &corev1.Namespace{}
	case "PodDisruptionBudget":
		obj = &policyv1.PodDisruptionBudget{}
	default:
		t.Errorf("%s: %s/%s: no API type known to this test; add it", dir, kind, name)
		return
	}
	if err := sigsyaml.UnmarshalStrict(raw, obj); err != nil {
		t.Errorf("%s: %s/%s does not decode strictly into its API type: %v", dir, kind, name, err)
	}
}
