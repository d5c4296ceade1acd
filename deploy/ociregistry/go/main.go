// A loopback OCI registry for tests: go-containerregistry's in-memory registry on 127.0.0.1.
// It writes the port it bound to a file, so parallel test sessions never collide.
package main

import (
	"flag"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	portFile := flag.String("port-file", "", "write the bound port here")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	if *portFile != "" {
		port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		if err := os.WriteFile(*portFile+".tmp", []byte(port), 0o644); err != nil {
			log.Fatal(err)
		}
		if err := os.Rename(*portFile+".tmp", *portFile); err != nil {
			log.Fatal(err)
		}
	}
	handler := registry.New(registry.Logger(log.New(os.Stderr, "", 0)))
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.Serve(ln))
}
