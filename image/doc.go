// Package image is slopbox's image store: it pulls images from OCI and
// Docker v2 registries (go-containerregistry), loads and saves docker-save
// and OCI archives, and unpacks layers safely into an extracted-layer cache
// keyed by diffID.
//
// On-disk layout under the store root (see DefaultRoot):
//
//	oci/             an OCI image layout: oci-layout, index.json, blobs/sha256/…
//	                 (index entries carry org.opencontainers.image.ref.name)
//	layers/sha256/H/ layer with diffID sha256:H extracted in overlayfs-ready
//	                 form: whiteouts are 0/0 character devices, opaque
//	                 directories carry user.overlay.opaque=y
//	tmp/PID-…        staging; every blob and layer is written here, verified,
//	                 and committed by rename, so a crash never leaves a
//	                 half-written object under its final name
//	lock             shared by writers, exclusive for garbage collection
//	index.lock       exclusive while index.json is rewritten
//
// Layers are extracted inside a user namespace whose root is the invoking
// user (root: the start of root's subordinate range) and whose other ids are
// the subordinate range, so image ownership is preserved on disk and a
// sandbox mounts the layers as overlay lowerdirs in the same namespace
// without copying anything.
package image
