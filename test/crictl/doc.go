// Package crictl pins crictl (sigs.k8s.io/cri-tools), the kubelet's CRI
// debugging client, which TestCRI (test/integration) builds from this
// module with `go build sigs.k8s.io/cri-tools/cmd/crictl` and runs against
// containerd's CRI plugin with slopbox as the runtime handler. It is a
// module of its own so Kubernetes' dependencies stay out of slopbox's.
package crictl
