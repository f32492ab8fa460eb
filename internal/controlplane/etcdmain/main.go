// Command etcdmain is etcd built from the etcd server module pinned in
// go.mod. The control plane package builds it on demand (and caches the
// binary) so tests and the sandbox never depend on an etcd installed on the
// host, and always run the exact etcd version the apiserver was tested with.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
