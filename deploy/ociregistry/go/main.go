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
	sealFile := flag.String("seal-file", "",
		"once this file exists, refuse every write (push, delete): read-only to everyone")
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
	var handler http.Handler = registry.New(registry.Logger(log.New(os.Stderr, "", 0)))
	if *sealFile != "" {
		handler = sealed(handler, *sealFile)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.Serve(ln))
}

// sealed answers reads always and writes only until `seal` exists: `make run`'s sample registry
// takes its samples, then is read-only, so nobody on the node can replace or delete them.
func sealed(next http.Handler, seal string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if _, err := os.Stat(seal); err == nil {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusMethodNotAllowed)
				_, _ = w.Write([]byte(`{"errors":[{"code":"UNSUPPORTED","message":"this registry is read-only: it serves the samples only"}]}`))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
