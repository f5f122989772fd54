# shellcheck shell=bash disable=SC2034 # an adapter sourced by the bench harness, which reads A_*
# The pull floor: sequential `tar -xzf` of pyslim's layer blobs (already on
# disk, so no network) into a fresh directory on the same disk, as the bench
# user. Any real pull also downloads and verifies, so this is a lower bound.
A_USER=bench
A_DESC="floor: sequential tar -xzf of the pyslim layers (no download, no verification)"
_floor_dir() { user_dir tar-floor; }
a_available() { [[ -d $WORK_DIR/oci/pyslim ]]; }
a_setup() {
  local d; d=$(_floor_dir); mkdir -p "$d/blobs"
  local man; man=$(jq -r '.manifests[0].digest' "$WORK_DIR/oci/pyslim/index.json" | cut -d: -f2)
  for l in $(jq -r '.layers[].digest' "$WORK_DIR/oci/pyslim/blobs/sha256/$man" | cut -d: -f2); do
    cp "$WORK_DIR/oci/pyslim/blobs/sha256/$l" "$d/blobs/$l"; echo "$l"
  done > "$d/layers"
  chown -R "$BENCH_USER:" "$d"
}
a_pull_prepare_cmd() { echo "rm -rf $(_floor_dir)/rootfs"; }
a_pull_cmd() {
  local d; d=$(_floor_dir)
  echo "mkdir $d/rootfs && for l in \$(cat $d/layers); do tar -xzf $d/blobs/\$l -C $d/rootfs; done"
}
