// Package lowerdirs orders an image's layer directories for an overlay
// mount's lowerdir option.
package lowerdirs

import "slices"

// Of returns layers (oldest first, as an image lists them) newest first,
// as lowerdir wants them, with each directory once: overlayfs refuses a
// lower layer given twice (ELOOP), and an image may list a layer twice
// (two RUN steps that changed nothing have the same empty layer). The
// topmost occurrence is kept: a layer applied again over others hides and
// removes what it did the first time, so the lower occurrence changes
// nothing.
func Of(layers []string) []string {
	out := make([]string, 0, len(layers))
	seen := make(map[string]bool, len(layers))
	for _, l := range slices.Backward(layers) {
		if !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	return out
}
