// Command server is the tiny program the runtime conformance suite boots in
// every test sandbox: a static HTTP server whose in-memory counter, files and
// allocations let the suite see what survives a checkpoint and what a limit
// stops.
//
//	GET  /              increments the counter and returns it
//	GET  /count         returns the counter without changing it
//	PUT  /file?path=P   writes the body to P
//	GET  /file?path=P   returns the contents of P
//	POST /alloc?mb=N    allocates and touches N MiB more, kept until exit
//	POST /spawn?n=N     starts N child processes that sleep; returns how many started
//	POST /child-alloc?mb=N  runs a child process that allocates and touches N MiB;
//	                    returns how it ended ("exited 0", "signal: killed", ...)
//	GET  /addrs         returns the sandbox's interface addresses
//	GET  /statfs?path=P returns the size of P's filesystem in bytes
//	POST /cow?path=P    maps file P privately, reads every page, writes one
//	                    byte in the middle, and returns the kB of the mapping
//	                    that became private copies (smaps' Anonymous)
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "sleep" {
		time.Sleep(time.Hour)
		return
	}
	if len(os.Args) > 2 && os.Args[1] == "alloc" {
		mb, _ := strconv.Atoi(os.Args[2])
		var hoard [][]byte
		for range mb {
			hoard = append(hoard, touched())
		}
		fmt.Println(len(hoard))
		return
	}
	listen := flag.String("listen", ":49983", "address to listen on")
	flag.Parse()

	s := &server{}
	http.HandleFunc("GET /{$}", s.increment)
	http.HandleFunc("GET /count", s.count)
	http.HandleFunc("PUT /file", putFile)
	http.HandleFunc("GET /file", getFile)
	http.HandleFunc("POST /alloc", s.alloc)
	http.HandleFunc("POST /spawn", s.spawn)
	http.HandleFunc("POST /child-alloc", childAlloc)
	http.HandleFunc("GET /statfs", statfs)
	http.HandleFunc("GET /addrs", addrs)
	http.HandleFunc("POST /cow", cow)
	log.Printf("listening on %s", *listen)
	log.Fatal(http.ListenAndServe(*listen, nil))
}

// server is what the suite checks survives a checkpoint: a counter, the
// memory allocated and the children started, all kept until exit.
type server struct {
	mu       sync.Mutex
	counter  int
	hoard    [][]byte
	children []*exec.Cmd
}

// touched is a MiB with every page written, so that it counts.
func touched() []byte {
	b := make([]byte, 1<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	return b
}

func (s *server) increment(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.counter++
	n := s.counter
	s.mu.Unlock()
	fmt.Fprint(w, n)
}

func (s *server) count(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprint(w, s.counter)
}

func putFile(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err == nil {
		err = os.WriteFile(r.URL.Query().Get("path"), b, 0o644)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

func getFile(w http.ResponseWriter, r *http.Request) {
	b, err := os.ReadFile(r.URL.Query().Get("path"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	w.Write(b)
}

func (s *server) alloc(w http.ResponseWriter, r *http.Request) {
	mb, err := strconv.Atoi(r.URL.Query().Get("mb"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	for range mb {
		b := touched()
		s.mu.Lock()
		s.hoard = append(s.hoard, b)
		s.mu.Unlock()
	}
	fmt.Fprintf(w, "allocated %d MiB", mb)
}

func (s *server) spawn(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(r.URL.Query().Get("n"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	started := 0
	var lastErr error
	for range n {
		c := exec.Command("/proc/self/exe", "sleep")
		if err := c.Start(); err != nil {
			lastErr = err
			continue
		}
		started++
		s.mu.Lock()
		s.children = append(s.children, c)
		s.mu.Unlock()
	}
	fmt.Fprintf(w, "%d", started)
	if lastErr != nil {
		log.Printf("spawn: %v", lastErr)
	}
}

func childAlloc(w http.ResponseWriter, r *http.Request) {
	mb := r.URL.Query().Get("mb")
	if _, err := strconv.Atoi(mb); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	err := exec.Command("/proc/self/exe", "alloc", mb).Run()
	if err == nil {
		fmt.Fprint(w, "exited 0")
		return
	}
	fmt.Fprint(w, err.Error())
}

func statfs(w http.ResponseWriter, r *http.Request) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(r.URL.Query().Get("path"), &st); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	fmt.Fprint(w, st.Blocks*uint64(st.Bsize))
}

func addrs(w http.ResponseWriter, r *http.Request) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	for _, a := range addrs {
		fmt.Fprintln(w, a)
	}
}

func cow(w http.ResponseWriter, r *http.Request) {
	f, err := os.Open(r.URL.Query().Get("path"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer syscall.Munmap(m)
	var sum byte
	for i := 0; i < len(m); i += 4096 {
		sum += m[i]
	}
	m[len(m)/2] = sum + 1
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	// The mapping's entry: its address range, then its fields.
	start := fmt.Sprintf("%x-", uintptr(unsafe.Pointer(&m[0])))
	in := false
	for _, line := range strings.Split(string(smaps), "\n") {
		if strings.HasPrefix(line, start) {
			in = true
		} else if in && strings.HasPrefix(line, "Anonymous:") {
			fmt.Fprint(w, strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(line, "Anonymous:"), "kB")))
			return
		}
	}
	http.Error(w, "no smaps entry for the mapping", http.StatusInternalServerError)
}
