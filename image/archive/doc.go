// Package archive applies image layers (tar streams) to directories in
// overlayfs-ready form, safely, as containerd's archive package does: every
// path is resolved inside the layer's directory (absolute names, "..",
// symlinks that climb out, hardlinks out of the root are refused), both
// kinds of whiteout become overlayfs whiteouts and opaque markers, device
// nodes are skipped where mknod is not allowed, and ownership is kept or
// shifted through an id mapping. It knows nothing of the store; image/
// uses it to extract what it pulls and loads. FuzzApplyLayer is beside it.
package archive
