package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"

	"github.com/berth-sh/berth/internal/controlplane"
)

func main() {
	cp, err := controlplane.Start(context.Background(), controlplane.Options{CRDDirs: []string{os.Args[1]}})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	defer cp.Stop()
	if err := cp.WriteKubeconfig("/tmp/zz.kubeconfig"); err != nil {
		fmt.Println("ERR", err)
		return
	}
	out, err := exec.Command("kubectl", "--kubeconfig", "/tmp/zz.kubeconfig", "get", "crd,ns").CombinedOutput()
	fmt.Printf("kubectl: %v\n%s\n", err, out)
	fmt.Printf("timings %+v\n", cp.StartupTimings())
}
