// Package deploy holds sluice's deployment files — the Dockerfile, the
// docker-compose file and the Kubernetes kustomize base and overlays
// (docs/deploy.md) — and the tests that check what can be checked
// without a container engine or a cluster:
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
//   - every image is pinned to an exact release;
//   - every command they run exists in the binary and every environment
//     passes `sluice config check`;
//   - the built binary refuses bad configuration loudly and never shows a
//     credential.
//
// It keeps the deployment from drifting from the code, so an operator never
// meets a typo or a refused pod at start-up.
package deploy
