package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
)

// podUID is the numeric user and group of the image (distroless' nonroot)
// and of every pod's runAsUser, runAsGroup and fsGroup.
const podUID = 65532

// secretName is the Secret the user creates (docs/deploy.md); the
// kustomizations reference it and never contain it.
const secretName = "sluice"

// rendered is one kustomization built by kubectl, decoded into the
// Kubernetes API types.
type rendered struct {
	dir        string // the kustomization
	configMaps map[string]map[string]string
	workloads  []workload
	pdbs       []policyv1.PodDisruptionBudget
	netpols    []networkingv1.NetworkPolicy
	// podMonitors and rules are the monitoring resources (prometheus_test.go).
	podMonitors []monitoringv1.PodMonitor
	rules       []monitoringv1.PrometheusRule
}

// workload is a Deployment or Job: its pod template, whether it is a
// long-running service (probes, disruption budget, spread), and a
// Deployment's replicas.
type workload struct {
	kind, name string
	service    bool
	replicas   *int32
	pod        corev1.PodTemplateSpec
}

// kustomizations lists the base and every overlay.
func kustomizations(t *testing.T) []string {
	overlays, err := filepath.Glob("k8s/overlays/*/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dirs := []string{"k8s/base"}
	for _, o := range overlays {
		dirs = append(dirs, filepath.Dir(o))
	}
	return dirs
}

func render(t *testing.T, dir string) rendered {
	t.Helper()
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Fatalf("kubectl is needed to build the kustomizations: %v", err)
	}
	out, err := exec.Command("kubectl", "kustomize", dir).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, ee.Stderr)
		}
		t.Fatal(err)
	}
	r := rendered{dir: dir, configMaps: map[string]map[string]string{}}
	dec := yaml.NewDecoder(bytes.NewReader(out))
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
		var head struct {
			Kind     string `yaml:"kind"`
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
		}
		if err := node.Decode(&head); err != nil {
			t.Fatalf("%s: decode: %v", dir, err)
		}
		where := fmt.Sprintf("%s: %s/%s", dir, head.Kind, head.Metadata.Name)
		// strict decodes raw into obj, refusing unknown or misspelt fields
		// as the API server would.
		strict := func(obj any) bool {
			if err := sigsyaml.UnmarshalStrict(raw, obj); err != nil {
				t.Errorf("%s does not decode strictly into its API type: %v", where, err)
				return false
			}
			return true
		}
		switch head.Kind {
		case "Deployment":
			var d appsv1.Deployment
			if strict(&d) {
				r.workloads = append(r.workloads, workload{kind: "Deployment", name: d.Name, service: true, replicas: d.Spec.Replicas, pod: d.Spec.Template})
				if d.Spec.Selector == nil || !selects(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
					t.Errorf("%s: selector does not select its own pods", where)
				}
			}
		case "Job":
			var j batchv1.Job
			if strict(&j) {
				r.workloads = append(r.workloads, workload{kind: "Job", name: j.Name, pod: j.Spec.Template})
			}
		case "ConfigMap":
			var c corev1.ConfigMap
			if strict(&c) {
				r.configMaps[c.Name] = c.Data
			}
		case "PodDisruptionBudget":
			var p policyv1.PodDisruptionBudget
			if strict(&p) {
				r.pdbs = append(r.pdbs, p)
			}
		case "NetworkPolicy":
			var n networkingv1.NetworkPolicy
			if strict(&n) {
				r.netpols = append(r.netpols, n)
			}
		case "Service":
			strict(&corev1.Service{})
		case "Namespace":
			strict(&corev1.Namespace{})
		case "PodMonitor":
			var m monitoringv1.PodMonitor
			if strict(&m) {
				r.podMonitors = append(r.podMonitors, m)
			}
		case "PrometheusRule":
			var p monitoringv1.PrometheusRule
			if strict(&p) {
				r.rules = append(r.rules, p)
			}
		case "Secret":
			// A committed Secret is a placeholder at best and a leaked
			// credential at worst: the user creates it (docs/deploy.md).
			t.Errorf("%s: a Secret is committed; reference the Secret %q the user creates instead", where, secretName)
		default:
			t.Errorf("%s: no API type known to this test; add it", where)
		}
	}
	if len(r.workloads) == 0 {
		t.Fatalf("%s: no workloads", dir)
	}
	return r
}

// selects reports whether matchLabels (non-empty) selects labels.
func selects(matchLabels, labels map[string]string) bool {
	if len(matchLabels) == 0 {
		return false
	}
	for k, v := range matchLabels {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestKustomizations renders the base and every overlay and checks every
// workload for what makes it start and run safely on a cluster that
// enforces the restricted Pod Security Standard.
func TestKustomizations(t *testing.T) {
	for _, dir := range kustomizations(t) {
		t.Run(dir, func(t *testing.T) {
			r := render(t, dir)
			for _, w := range r.workloads {
				checkWorkload(t, dir+" "+w.kind+"/"+w.name, w, r)
			}
		})
	}
}

func checkWorkload(t *testing.T, where string, w workload, r rendered) {
	t.Helper()
	pod := w.pod.Spec
	labels := w.pod.Labels

	// Pod security: numeric non-root ids (the image's USER), seccomp.
	sc := pod.SecurityContext
	if sc == nil {
		t.Errorf("%s: no pod securityContext", where)
		sc = &corev1.PodSecurityContext{}
	}
	if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("%s: pod must set runAsNonRoot", where)
	}
	for name, id := range map[string]*int64{"runAsUser": sc.RunAsUser, "runAsGroup": sc.RunAsGroup, "fsGroup": sc.FSGroup} {
		if id == nil || *id != podUID {
			t.Errorf("%s: pod %s must be %d (the image's numeric USER)", where, name, podUID)
		}
	}
	if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: pod seccompProfile must be RuntimeDefault", where)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("%s: automountServiceAccountToken must be false (sluice does not call the Kubernetes API)", where)
	}
	if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
		t.Errorf("%s: enableServiceLinks must be false (service links look like typos to sluice config check)", where)
	}

	emptyDirs := map[string]bool{}
	for _, v := range pod.Volumes {
		if v.EmptyDir != nil {
			emptyDirs[v.Name] = true
		}
	}
	containers := append(slices.Clone(pod.InitContainers), pod.Containers...)
	for i, c := range containers {
		isInit := i < len(pod.InitContainers)
		cw := where + " container " + c.Name
		checkContainerImage(t, cw, c)
		csc := c.SecurityContext
		if csc == nil {
			t.Errorf("%s: no securityContext", cw)
			csc = &corev1.SecurityContext{}
		}
		if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
			t.Errorf("%s: allowPrivilegeEscalation must be false", cw)
		}
		if csc.Privileged != nil && *csc.Privileged {
			t.Errorf("%s: privileged", cw)
		}
		if csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem {
			t.Errorf("%s: readOnlyRootFilesystem must be true", cw)
		}
		if csc.Capabilities == nil || !slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(csc.Capabilities.Add) > 0 {
			t.Errorf("%s: capabilities must drop ALL and add none", cw)
		}
		// Writable paths are emptyDirs; /tmp is one.
		tmp := false
		for _, m := range c.VolumeMounts {
			if !m.ReadOnly && !emptyDirs[m.Name] {
				t.Errorf("%s: writable mount %s is not an emptyDir", cw, m.MountPath)
			}
			if m.MountPath == "/tmp" && emptyDirs[m.Name] {
				tmp = true
			}
		}
		if !tmp {
			t.Errorf("%s: no emptyDir at /tmp (the root filesystem is read-only)", cw)
		}
		// Requests and limits.
		for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if q, ok := c.Resources.Requests[res]; !ok || q.IsZero() {
				t.Errorf("%s: no %s request", cw, res)
			}
			if q, ok := c.Resources.Limits[res]; !ok || q.IsZero() {
				t.Errorf("%s: no %s limit", cw, res)
			}
		}
		if w.service && !isInit {
			checkProbes(t, cw, c)
		}
		if c.Image != localImage && !strings.Contains(c.Image, "sluice") {
			continue
		}
		checkCommand(t, cw, c.Args)
		checkEnv(t, cw, sluiceEnv(t, cw, c, r, c.Args[0]))
	}

	// A disruption budget and a spread for every service; a network policy
	// for every workload.
	if w.service {
		pdbs := 0
		for _, p := range r.pdbs {
			if p.Spec.Selector != nil && selects(p.Spec.Selector.MatchLabels, labels) {
				pdbs++
				if p.Spec.MaxUnavailable == nil && p.Spec.MinAvailable == nil {
					t.Errorf("%s: PodDisruptionBudget %s sets neither maxUnavailable nor minAvailable", where, p.Name)
				}
			}
		}
		if pdbs != 1 {
			t.Errorf("%s: %d PodDisruptionBudgets select its pods, want 1", where, pdbs)
		}
		keys := map[string]bool{}
		for _, c := range pod.TopologySpreadConstraints {
			if c.LabelSelector == nil || !selects(c.LabelSelector.MatchLabels, labels) {
				t.Errorf("%s: topologySpreadConstraint on %s does not select its own pods", where, c.TopologyKey)
			}
			keys[c.TopologyKey] = true
		}
		if !keys[corev1.LabelHostname] || !keys[corev1.LabelTopologyZone] {
			t.Errorf("%s: topologySpreadConstraints must spread over %s and %s, got %v", where, corev1.LabelHostname, corev1.LabelTopologyZone, keys)
		}
	}
	netpols := 0
	for _, n := range r.netpols {
		if selects(n.Spec.PodSelector.MatchLabels, labels) {
			netpols++
			if !slices.Contains(n.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) || !slices.Contains(n.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
				t.Errorf("%s: NetworkPolicy %s must restrict both Ingress and Egress", where, n.Name)
			}
			if len(n.Spec.Egress) == 0 {
				t.Errorf("%s: NetworkPolicy %s allows no egress at all (not even DNS)", where, n.Name)
			}
		}
	}
	if netpols != 1 {
		t.Errorf("%s: %d NetworkPolicies select its pods, want 1", where, netpols)
	}
}

func checkContainerImage(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	if c.Image == localImage {
		if c.ImagePullPolicy != corev1.PullNever {
			t.Errorf("%s: the local image %s needs imagePullPolicy Never, or it is a floating tag pulled from a registry", where, localImage)
		}
		return
	}
	if why := imageNotPinned(c.Image); why != "" {
		t.Errorf("%s: image %s %s", where, c.Image, why)
	}
}

// checkProbes: a service is started, alive and ready by its own HTTP
// server's /livez and /readyz, on a port the container declares.
func checkProbes(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	ports := map[string]bool{}
	for _, p := range c.Ports {
		ports[p.Name] = true
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"startupProbe", c.StartupProbe, "/livez"}, {"livenessProbe", c.LivenessProbe, "/livez"}, {"readinessProbe", c.ReadinessProbe, "/readyz"}} {
		switch {
		case p.probe == nil:
			t.Errorf("%s: no %s", where, p.name)
		case p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path:
			t.Errorf("%s: %s must GET %s", where, p.name, p.path)
		case !ports[p.probe.HTTPGet.Port.StrVal]:
			t.Errorf("%s: %s probes port %q, which the container does not name", where, p.name, p.probe.HTTPGet.Port.String())
		}
	}
}

// credentialsOf are the credentials each sluice command needs a Secret slot
// for: every one a service may use (the Postgres URLs of the roles, S3,
// Kafka SASL, Elasticsearch), the API tokens for the API, the Postgres URLs
// for migrate (it migrates every role's database, docs/scale-out.md).
func credentialsOf(command string) []string {
	if command == "migrate" {
		return []string{"DATABASE_URL", "EVENT_STORE_DATABASE_URL", "EVENT_STORE_SHARD_MAP", "REGISTRY_DATABASE_URL"}
	}
	var out []string
	for _, v := range sluiceconfig.Vars() {
		if v.FileOf != "" && (v.FileOf != "SLUICE_API_TOKENS" || command == "api") {
			out = append(out, v.FileOf)
		}
	}
	return out
}

// sluiceEnv is the environment the container would see: its ConfigMaps,
// its env values, a sample value for each Secret slot, and GOMEMLIMIT and
// GOMAXPROCS as the downward API computes them from the memory and CPU
// limits. It checks on the way that every credential comes from the Secret
// and that GOMEMLIMIT and GOMAXPROCS follow the limits.
func sluiceEnv(t *testing.T, where string, c corev1.Container, r rendered, command string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, ef := range c.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil:
			data, ok := r.configMaps[ef.ConfigMapRef.Name]
			if !ok {
				t.Errorf("%s: envFrom names ConfigMap %s, which the kustomization does not contain", where, ef.ConfigMapRef.Name)
			}
			for k, v := range data {
				env[k] = v
			}
		case ef.SecretRef != nil:
			t.Errorf("%s: envFrom Secret %s: give each credential its own secretKeyRef slot, so that a stray key is not an unknown variable", where, ef.SecretRef.Name)
		}
	}
	slots := map[string]*corev1.SecretKeySelector{}
	memLimit, cpuLimit := false, false
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			slots[e.Name] = e.ValueFrom.SecretKeyRef
			env[e.Name] = sampleCredential(e.Name)
		case e.ValueFrom.FieldRef != nil:
			env[e.Name] = "pod-name-0"
		case e.ValueFrom.ResourceFieldRef != nil:
			rf := e.ValueFrom.ResourceFieldRef
			switch {
			case e.Name == "GOMEMLIMIT" && rf.Resource == "limits.memory":
				memLimit = true
			case e.Name == "GOMAXPROCS" && rf.Resource == "limits.cpu":
				cpuLimit = true
			default:
				t.Errorf("%s: %s from resource %s: only GOMEMLIMIT from limits.memory and GOMAXPROCS from limits.cpu are expected", where, e.Name, rf.Resource)
				continue
			}
			if rf.Divisor.Cmp(resource.MustParse("1")) != 0 {
				// 1Mi would give 512 (bytes, to the runtime); 1m 1000
				// threads per CPU.
				t.Errorf("%s: %s divisor %s: only 1 gives the plain number the Go runtime reads", where, e.Name, rf.Divisor.String())
			}
			env[e.Name] = downwardValue(c.Resources.Limits, corev1.ResourceName(strings.TrimPrefix(rf.Resource, "limits.")))
		default:
			t.Errorf("%s: %s comes from an unexpected source", where, e.Name)
		}
	}
	if !memLimit {
		t.Errorf("%s: GOMEMLIMIT is not derived from the memory limit (env valueFrom resourceFieldRef limits.memory, divisor 1)", where)
	}
	if !cpuLimit {
		t.Errorf("%s: GOMAXPROCS is not derived from the CPU limit (env valueFrom resourceFieldRef limits.cpu, divisor 1)", where)
	}
	for _, name := range credentialsOf(command) {
		ref, ok := slots[name]
		if !ok {
			t.Errorf("%s: no Secret slot for %s (env valueFrom secretKeyRef)", where, name)
			continue
		}
		if ref.Name != secretName || ref.Key != name {
			t.Errorf("%s: %s comes from Secret %s key %s, want Secret %s key %s", where, name, ref.Name, ref.Key, secretName, name)
		}
		required := requiredSecret(r.dir, name)
		if optional := ref.Optional != nil && *ref.Optional; optional == required {
			t.Errorf("%s: %s slot optional=%v, want %v (required: DATABASE_URL, and the role URLs in %s)", where, name, optional, !required, scaleOutOverlay)
		}
	}
	for _, v := range sluiceconfig.Vars() {
		if v.FileOf == "" {
			continue
		}
		if _, inConfigMap := env[v.FileOf]; inConfigMap && slots[v.FileOf] == nil {
			t.Errorf("%s: credential %s is set outside the Secret", where, v.FileOf)
		}
	}
	return env
}

// downwardValue is what the kubelet gives for a resourceFieldRef of the
// limit of res with divisor 1: the limit rounded up to a whole number (a
// CPU limit of 500m gives 1, of 1500m 2; a memory limit its bytes).
func downwardValue(limits corev1.ResourceList, res corev1.ResourceName) string {
	q := limits[res]
	return fmt.Sprint(int64(math.Ceil(float64(q.MilliValue()) / 1000)))
}

// scaleOutOverlay is the kustomization of the scaled-out deployment
// (scale_test.go): Postgres split by role over two servers.
const scaleOutOverlay = "k8s/overlays/scale-out"

// requiredSecret reports whether the Secret key name must exist for the
// pods of kustomization dir to start: DATABASE_URL everywhere; in the
// scaled-out overlay the role URLs and the shard map too, so that no pod
// puts a role or shards on another server for want of its key.
func requiredSecret(dir, name string) bool {
	switch name {
	case "DATABASE_URL":
		return true
	case "EVENT_STORE_DATABASE_URL", "REGISTRY_DATABASE_URL", "EVENT_STORE_SHARD_MAP":
		return dir == scaleOutOverlay
	}
	return false
}

func sampleCredential(name string) string {
	switch name {
	case "DATABASE_URL":
		return "postgres://sluice:sample@postgres:5432/sluice?sslmode=require"
	case "EVENT_STORE_DATABASE_URL":
		return "postgres://sluice:sample@postgres-store:5432/sluice?sslmode=require"
	case "REGISTRY_DATABASE_URL":
		return "postgres://sluice:sample@postgres-registry:5432/sluice?sslmode=require"
	case "EVENT_STORE_SHARD_MAP":
		return "" // no map: its ranges depend on the overlay's EVENT_STORE_SHARDS (scale_test.go checks one)
	}
	return "sample"
}
