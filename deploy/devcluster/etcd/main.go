// Command tranche-etcd is etcd's server main, built from the go.etcd.io/etcd
// server module so the dev cluster needs no system etcd (Debian ships 3.4,
// which kube-apiserver 1.37 no longer supports). It lives in its own Go module
// because k8s.io/kubernetes v1.37 requires the etcd 3.7 client libraries and
// Go's minimal version selection would otherwise lift the server to 3.7 too.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
