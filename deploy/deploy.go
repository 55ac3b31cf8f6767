// Package deploy holds sluice's deployment files — the Dockerfile, the
// docker-compose file and the Kubernetes kustomize base and dev overlay
// (SPEC §15) — and the test that checks what can be checked without a
// container engine: the compose file loads and validates with the Compose
// Specification's own loader, the kustomizations build, every sluice command
// they run exists in the binary, and every variable they set is one the
// binary reads and accepts. It keeps the deployment from drifting from the
// code, so an operator never meets a typo at start-up.
package deploy
