package main

import (
	"os"

	"github.com/bookie-go/bookie/internal/hosts"
)

func init() {
	register("hosts-node", "(internal) one host of bk chaos --hosts: an etcd member, a bookie or a client, run in a namespace", runHostsNode)
}

// runHostsNode runs the node a bk chaos --hosts run describes in the JSON file args[0]
// (hosts.NodeConfig); the harness starts it with ip netns exec.
func runHostsNode(args []string) error {
	if code := hosts.NodeMain(args); code != 0 {
		os.Exit(code)
	}
	return nil
}
