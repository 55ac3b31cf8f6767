// Package deploy holds sluice's deployment files — the Dockerfile, the
// docker-compose file and the Kubernetes kustomize base and overlays, with
// a scaled-out example of each (docker-compose.scale.yml,
// k8s/overlays/scale-out: 4 shards, 2 relay replicas, Postgres split by
// role over two servers), the Prometheus alert rules and the Grafana
// dashboard (docs/deploy.md) — and the tests that check what can be
// checked without a container engine or a cluster:
//
//   - every kustomization renders (`kubectl kustomize`), decodes strictly
//     into the Kubernetes API types, and each workload starts under the
//     restricted Pod Security Standard (numeric non-root ids matching the
//     image's USER, read-only root with emptyDir scratch space, no
//     capabilities, seccomp), has probes, requests and limits, GOMEMLIMIT
//     derived from its memory limit, a disruption budget, a spread and a
//     network policy, and takes every credential from the user's Secret,
//     none of which is committed;
//   - the compose file loads with the Compose Specification's loader, its
//     stores persist where they write, every service is health-checked and
//     waited for;
//   - the scaled-out examples give every process the same shards and
//     Postgres URLs, split the roles over two servers, make each process
//     wait for the servers of its roles and migrate both databases;
//   - the alert rules parse with Prometheus' parsers, and the relay's
//     per-shard alerts, evaluated by Prometheus' engine, name the shard
//     without a leader, stalled or lagging, and only that one;
//   - every image is pinned to an exact release;
//   - every command they run exists in the binary and every environment
//     passes `sluice config check`;
//   - the built binary refuses bad configuration loudly and never shows a
//     credential.
//
// It keeps the deployment from drifting from the code, so an operator never
// meets a typo or a refused pod at start-up.
package deploy
