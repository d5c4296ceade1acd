// Command tranche-k8s is a multi-call binary holding the Kubernetes control
// plane (kube-apiserver, kube-controller-manager, kube-scheduler), the kubelet
// of the dev cluster's real nodes, kubectl and kwok. Linking them once instead
// of six times saves most of the link time and disk on small CI machines. The component is chosen by the name the binary is
// invoked as (a symlink, busybox style) or, failing that, by the first argument:
//
//	tranche-k8s kube-apiserver --etcd-servers=...
//	kubectl get nodes   (kubectl -> tranche-k8s symlink)
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata" // CronJob time zones, as in the upstream kube-apiserver main

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	_ "k8s.io/client-go/plugin/pkg/client/auth" // kubectl auth plugins
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format, as upstream
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as upstream
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric, as upstream
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"

	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodelease "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
	kwokconfig "sigs.k8s.io/kwok/pkg/config"
	kwokcmd "sigs.k8s.io/kwok/pkg/kwok/cmd"
	kwoklog "sigs.k8s.io/kwok/pkg/log"
	kwoksignals "sigs.k8s.io/kwok/pkg/utils/signals"
)

var components = map[string]func() int{
	"kube-apiserver":          func() int { return cli.Run(apiserver.NewAPIServerCommand()) },
	"kube-controller-manager": func() int { return cli.Run(controllermanager.NewControllerManagerCommand()) },
	"kube-scheduler":          func() int { return cli.Run(scheduler.NewSchedulerCommand()) },
	"kubelet":                 func() int { return cli.Run(kubelet.NewKubeletCommand(context.Background())) },
	"kubectl":                 runKubectl,
	"kwok":                    runKwok,
	"kwok-stages":             printKwokStages,
}

func main() {
	name := filepath.Base(os.Args[0])
	if _, ok := components[name]; !ok && len(os.Args) > 1 {
		// Called as tranche-k8s <component> ...: drop our own name so each
		// command parses os.Args exactly as its upstream main would.
		name = os.Args[1]
		os.Args = os.Args[1:]
	}
	run, ok := components[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "usage: tranche-k8s {kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kubectl|kwok|kwok-stages} [flags]\n")
		os.Exit(2)
	}
	os.Exit(run())
}

func runKubectl() int {
	// Verbosity is set before the command is built, as upstream kubectl does,
	// so that plugin and kuberc handling log at the requested level.
	logs.GlogSetter(kubectlcmd.GetLogVerbosity(os.Args)) // nolint:errcheck
	if err := cli.RunNoErrOutput(kubectlcmd.NewDefaultKubectlCommand()); err != nil {
		kubectlutil.CheckErr(err)
	}
	return 0
}

func runKwok() int {
	// cobra merges pflag.CommandLine into every root command. In this binary it
	// already holds the Kubernetes components' global flags (a non-bool
	// --version among them), which breaks kwok's own --version: give kwok the
	// empty global flag set its upstream main sees.
	pflag.CommandLine = pflag.NewFlagSet(os.Args[0], pflag.ExitOnError)

	flagset := pflag.NewFlagSet("global", pflag.ContinueOnError)
	flagset.ParseErrorsAllowlist.UnknownFlags = true
	flagset.Usage = func() {}

	ctx := kwoksignals.SetupSignalContext()
	ctx, logger := kwoklog.InitFlags(ctx, flagset)
	ctx, err := kwokconfig.InitFlags(ctx, flagset)
	if err != nil {
		logger.Error("Init config flags", "err", err)
		return 1
	}
	var command *cobra.Command = kwokcmd.NewCommand(ctx)
	command.PersistentFlags().AddFlagSet(flagset)
	if err := command.ExecuteContext(ctx); err != nil {
		logger.Error("Execute exit", "err", err)
		return 1
	}
	return 0
}

// printKwokStages writes kwok's own default stages (node init, heartbeat with
// lease, pod ready/complete/delete) as one multi-document YAML. kwokctl builds
// the same set; printing it from the binary keeps the launcher's kwok config
// in step with the kwok version that was built instead of a copied file.
func printKwokStages() int {
	docs := []string{
		nodefast.DefaultNodeInit,
		nodelease.DefaultNodeHeartbeatWithLease,
		podfast.DefaultPodReady,
		podfast.DefaultPodComplete,
		podfast.DefaultPodDelete,
	}
	for _, doc := range docs {
		fmt.Printf("---\n%s\n", doc)
	}
	return 0
}
