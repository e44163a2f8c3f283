#!/bin/sh
# Makes the certificates deploy/global.yaml mounts, with openssl, into DIR
# (default ./kpng-certs), and prints the kubectl commands that store them:
#
#   ca.crt, ca.key   kpng's own CA (keep ca.key off the cluster: it signs brains)
#   brain.crt/.key   the brains' serving certificate, for the names agents dial
#   agent.crt/.key   a client certificate for agents (only if you use mutual
#                    TLS instead of ServiceAccount tokens; see global.yaml)
#
# BRAIN_NAMES: the DNS names agents dial (space-separated, default
# "kpng-brain-0.cluster.example kpng-brain-1.cluster.example"); BRAIN_IPS:
# IP addresses to add, for agents that dial an address. DAYS: validity
# (default 365). Run it again to rotate: kpng re-reads the files when the
# Secret changes, with no restart.
set -eu

DIR=${1:-./kpng-certs}
BRAIN_NAMES=${BRAIN_NAMES:-"kpng-brain-0.cluster.example kpng-brain-1.cluster.example"}
BRAIN_IPS=${BRAIN_IPS:-}
DAYS=${DAYS:-365}
mkdir -p "$DIR"
cd "$DIR"

san=""
for n in $BRAIN_NAMES; do san="${san:+$san,}DNS:$n"; done
for ip in $BRAIN_IPS; do san="${san:+$san,}IP:$ip"; done
[ -n "$san" ] || { echo "global-certs.sh: BRAIN_NAMES and BRAIN_IPS are both empty" >&2; exit 2; }

if [ ! -f ca.key ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days $((DAYS * 3)) \
    -keyout ca.key -out ca.crt -subj "/CN=kpng-ca" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi

sign() { # name subject extensions
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
  printf '%s\n' "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days "$DAYS" -out "$1.crt" -extfile "$1.ext" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
sign brain "/CN=kpng-brain" "subjectAltName=$san
extendedKeyUsage=serverAuth
keyUsage=critical,digitalSignature"
sign agent "/CN=kpng-agent" "extendedKeyUsage=clientAuth
keyUsage=critical,digitalSignature"

cat <<EOF
Certificates in $(pwd). Store them (kube-system; agents mount only its ca.crt):
  kubectl -n kube-system create secret generic kpng-brain-tls --from-file=tls.crt=brain.crt --from-file=tls.key=brain.key --from-file=ca.crt=ca.crt --dry-run=client -o yaml | kubectl apply -f -
Mutual TLS instead of tokens (see global.yaml):
  kubectl -n kube-system create secret generic kpng-agent-tls --from-file=tls.crt=agent.crt --from-file=tls.key=agent.key --dry-run=client -o yaml | kubectl apply -f -
EOF
