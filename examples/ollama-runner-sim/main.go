// ollama-runner-sim: a look-alike of an Ollama runner (Go, with its model
// state in C memory through cgo), the Go target of retain's end-to-end tests.
// No model: its "inference" allocates like a runner with a KV cache trie and
// a state snapshot cache (bounded, by design) and, with --leak-orphans, the
// orphaned trie nodes that keep their KV buffers alive (a leak). See
// README.md for what each owner keeps per request.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	host := flag.String("host", "127.0.0.1", "address to listen on (loopback only)")
	port := flag.Int("port", 8080, "port to listen on (0 = any free port)")
	kvKiB := flag.Int("kv-kib-per-token", 4, "KV cache bytes per token, in KiB")
	trieKiB := flag.Int("trie-kib", 512, "KV trie budget in KiB (least recently used leaves evicted beyond)")
	stateMiB := flag.Int("state-mib", 4, "size of one state snapshot in MiB")
	cacheMiB := flag.Int("cache-mib", 16, "state snapshot cache budget in MiB (0 = no snapshots)")
	leak := flag.Bool("leak-orphans", false, "reproduce the orphaned-trie-node leak")
	chunks := flag.Int("stream-chunks", 4, "pieces per streamed answer")
	scratchMiB := flag.Int("scratch-mib", 2, "scratch buffer per request in MiB (freed)")
	signals := flag.Bool("handle-signals", true,
		"shut down gracefully on SIGINT/SIGTERM (false: the Go runtime's default, death by the signal)")
	flag.Parse()

	ip := net.ParseIP(*host)
	if *host == "localhost" {
		ip = net.IPv4(127, 0, 0, 1)
	}
	if ip == nil || !ip.IsLoopback() {
		fmt.Fprintf(os.Stderr, "ollama-runner-sim: --host %q is not a loopback address\n", *host)
		os.Exit(2)
	}
	if *kvKiB < 1 || *trieKiB < 0 || *stateMiB < 1 || *cacheMiB < 0 || *chunks < 0 || *scratchMiB < 0 {
		fmt.Fprintln(os.Stderr, "ollama-runner-sim: sizes must be >= 0 (kv and state >= 1)")
		os.Exit(2)
	}
	server := newServer(options{
		kvBytesPerToken: *kvKiB << 10,
		trieBytes:       *trieKiB << 10,
		stateBytes:      *stateMiB << 20,
		cacheBytes:      *cacheMiB << 20,
		leakOrphans:     *leak,
		streamChunks:    *chunks,
		scratchBytes:    *scratchMiB << 20,
	})
	listener, err := net.Listen("tcp", net.JoinHostPort(ip.String(), fmt.Sprint(*port)))
	if err != nil {
		fmt.Fprintf(os.Stderr, "ollama-runner-sim: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("listening on %s\n", listener.Addr())

	mux := http.NewServeMux()
	mux.HandleFunc("/completion", server.handleCompletion)
	mux.HandleFunc("/health", server.handleHealth)
	mux.HandleFunc("/unload", server.handleUnload)
	httpServer := &http.Server{Handler: mux}
	go server.run()

	stopped := make(chan struct{})
	if *signals {
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
		go func() {
			sig := <-stop
			fmt.Fprintf(os.Stderr, "ollama-runner-sim: %v: shutting down\n", sig)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			httpServer.Shutdown(ctx)
			close(stopped)
		}()
	}
	if err := httpServer.Serve(listener); !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(os.Stderr, "ollama-runner-sim: %v\n", err)
		os.Exit(1)
	}
	<-stopped
	server.freeAll()
	fmt.Fprintln(os.Stderr, "ollama-runner-sim: stopped")
}
