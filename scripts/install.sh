#!/usr/bin/env bash
# Installs slopbox under DESTDIR/PREFIX (make install; make deb stages the
# package with it): the binary, bash/zsh/fish completions and one man page
# per verb, generated from the commands, the systemd units that start
# `slopbox serve` on the first connection to its socket (user units for
# rootless use, system units for root), and the examples. It runs in a
# checkout after make build: the man pages need the source and its Go.
#   PREFIX=/usr/local DESTDIR= SLOPBOX=bin/slopbox scripts/install.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
SLOPBOX=${SLOPBOX:-bin/slopbox}
[[ -x $SLOPBOX ]] || { echo "$SLOPBOX is missing: run make build first" >&2; exit 1; }

bindir=$PREFIX/bin
share=$DESTDIR$PREFIX/share
# Debian's zsh looks in vendor-completions for packaged files, and in
# site-functions under /usr/local.
if [[ $PREFIX == /usr ]]; then zshdir=$share/zsh/vendor-completions; else zshdir=$share/zsh/site-functions; fi

# The man pages come from the commands themselves, through a build of the
# same source with the slopbox_manpages tag: cobra's man page generator
# stays out of the installed binary, whose every start would initialise
# its markdown parser. Built first, so that a missing Go fails the install
# before anything is installed: the Go make deps put in .work/go, else $GO
# or the one on PATH.
man=$(mktemp -d)
trap 'rm -rf "$man"' EXIT
version=$("$SLOPBOX" --version)
version=${version##* }
GO=${GO:-$( [[ -x .work/go/bin/go ]] && echo "$PWD/.work/go/bin/go" || echo go )}
command -v "$GO" >/dev/null || { echo "no Go ($GO) to build the man pages with: run make install, which installs it, or set GO" >&2; exit 1; }
"$GO" build -buildvcs=false -tags "seccomp netgo osusergo slopbox_manpages" -ldflags "-X main.version=$version" -o "$man/slopbox-manpages" ./cmd/slopbox

install -d "$DESTDIR$bindir" "$share/bash-completion/completions" "$zshdir" "$share/fish/vendor_completions.d" \
	"$share/man/man1" "$DESTDIR$PREFIX/lib/systemd/user" "$DESTDIR$PREFIX/lib/systemd/system" "$share/doc/slopbox/examples"
install -m 0755 "$SLOPBOX" "$DESTDIR$bindir/slopbox"

"$SLOPBOX" completion bash >"$share/bash-completion/completions/slopbox"
"$SLOPBOX" completion zsh >"$zshdir/_slopbox"
"$SLOPBOX" completion fish >"$share/fish/vendor_completions.d/slopbox.fish"

"$man/slopbox-manpages" __manpages "$man"
for page in "$man"/*.1; do
	gz=$share/man/man1/${page##*/}.gz
	gzip -9n <"$page" >"$gz"
	chmod 0644 "$gz"
done

for kind in user system; do
	for u in slopbox.socket slopbox.service; do
		sed "s|@BINDIR@|$bindir|g" "contrib/systemd/$kind/$u" >"$DESTDIR$PREFIX/lib/systemd/$kind/$u"
		chmod 0644 "$DESTDIR$PREFIX/lib/systemd/$kind/$u"
	done
done

# The examples a user starts from (the Go one builds in slopbox's checkout).
for f in slopcodebench/python-docker.yaml slopcodebench/local.yaml rlm_code/rlm_config.yaml open_atp/session.sh dockerpy/harness.py; do
	install -D -m "$([[ $f == *.sh ]] && echo 0755 || echo 0644)" "examples/$f" "$share/doc/slopbox/examples/$f"
done
echo "installed slopbox in ${DESTDIR}${PREFIX}"
