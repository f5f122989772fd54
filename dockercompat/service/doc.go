// Package service is the Docker service over the sandbox backend, the one
// implementation every surface calls (issue 43; podman's ContainerEngine,
// which its CLI and its compat handlers share, is the model): the slopbox
// CLI turns flags into its options and prints its results, the Engine API
// (serve) turns a route into its options and answers its results.
//
//   - Verbs: Service (create, list, prune, wait, rename, volumes, networks,
//     build, commit) and Container (start, stop, kill, restart and rm by
//     hand, logs, top, stats, diff, export, cp, exec, attach, update).
//   - Views: Docker's objects of a container and an image (Inspect,
//     ImageInspect, State, Status, Top, LogWindow, the ps filters).
//   - Supervision: a container's restart policy and healthcheck, carried
//     out whichever surface started it, with no daemon (supervise.go).
//
// Its vocabulary is the sandbox backend's records (Info, Volume, Stats,
// …): data only. The surfaces import neither sandbox nor oci
// (TestSurfacesThroughService in test/fences).
package service
