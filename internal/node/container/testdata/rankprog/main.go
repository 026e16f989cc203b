// Command rankprog is what the container tests run inside their image: a
// static program with one mode per behaviour under test.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"
)

func main() {
	switch os.Args[1] {
	case "env-exit": // print the environment, write a file into $MARK_DIR, exit with $2
		env := os.Environ()
		sort.Strings(env)
		for _, kv := range env {
			fmt.Println(kv)
		}
		wd, _ := os.Getwd()
		fmt.Println("cwd=" + wd)
		if err := os.WriteFile(filepath.Join(os.Getenv("MARK_DIR"), "mark"), []byte("written in the container\n"), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "to stderr")
		code, _ := strconv.Atoi(os.Args[2])
		os.Exit(code)
	case "wait-term": // say ready, then exit 143 on SIGTERM (noting SIGUSR1)
		c := make(chan os.Signal, 2)
		signal.Notify(c, syscall.SIGTERM, syscall.SIGUSR1)
		fmt.Println("ready")
		for s := range c {
			fmt.Println("got", s)
			if s == syscall.SIGTERM {
				os.Exit(143)
			}
		}
	case "sleep":
		fmt.Println("ready")
		time.Sleep(time.Hour)
	case "alloc": // allocate and touch memory until killed
		var keep [][]byte
		for {
			b := make([]byte, 8<<20)
			for i := range b {
				b[i] = 1
			}
			keep = append(keep, b)
		}
	}
}
