#!/usr/bin/env bash
# Builds the Debian package and the plain tarball for edge devices.
#
#   packaging/build.sh [--bin PATH] [--out DIR]
#
# Without --bin it builds the release binary first. Outputs
# DIR/liftbridge_<version>_<arch>.deb and DIR/liftbridge-<version>-<arch>.tar.gz
# (DIR defaults to target/package).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=""
out="target/package"
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
if [ -z "$bin" ]; then
  cargo build --release --bin liftbridge
  bin=target/release/liftbridge
fi
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
arch=$(dpkg --print-architecture)
mkdir -p "$out"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

# Debian package layout.
root="$stage/deb"
install -D -s -m 0755 "$bin" "$root/usr/bin/liftbridge"
install -D -m 0644 systemd/liftbridge.service "$root/lib/systemd/system/liftbridge.service"
install -D -m 0640 packaging/liftbridge.yaml "$root/etc/liftbridge/liftbridge.yaml"
install -D -m 0644 README.md "$root/usr/share/doc/liftbridge/README.md"
install -D -m 0644 packaging/debian/copyright "$root/usr/share/doc/liftbridge/copyright"
# nats-server compatibility: the binary behaves as nats-server when invoked
# under that name. The link lives outside PATH so it never shadows a real
# nats-server; put /usr/lib/liftbridge/bin first on PATH to use it.
mkdir -p "$root/usr/lib/liftbridge/bin"
ln -s /usr/bin/liftbridge "$root/usr/lib/liftbridge/bin/nats-server"
mkdir -p "$root/DEBIAN"
for f in postinst prerm postrm conffiles; do
  install -m 0755 "packaging/debian/$f" "$root/DEBIAN/$f"
done
chmod 0644 "$root/DEBIAN/conffiles"
size=$(du -sk "$root" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@SIZE@/$size/" \
  packaging/debian/control > "$root/DEBIAN/control"
dpkg-deb --root-owner-group --build "$root" "$out/liftbridge_${version}_${arch}.deb" >/dev/null

# Tarball: binary, unit, default config and README in one folder.
tdir="$stage/liftbridge-$version-$arch"
install -D -s -m 0755 "$bin" "$tdir/liftbridge"
install -D -m 0644 systemd/liftbridge.service "$tdir/liftbridge.service"
install -D -m 0644 packaging/liftbridge.yaml "$tdir/liftbridge.yaml"
install -D -m 0644 README.md "$tdir/README.md"
tar -C "$stage" -czf "$out/liftbridge-$version-$arch.tar.gz" "liftbridge-$version-$arch"
echo "$out/liftbridge_${version}_${arch}.deb"
echo "$out/liftbridge-$version-$arch.tar.gz"
