package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// nginxProc is nginx running as a plain round-robin reverse proxy in front of the engines:
// the peer for what any proxy costs, before picking or parsing anything.
type nginxProc struct {
	cmd    *exec.Cmd
	dir    string
	url    string
	stderr bytes.Buffer
	exited chan error // gets cmd.Wait's result
}

// nginxConf keeps every path nginx writes inside dir. Keep-alive both ways, no
// buffering (streams pass through as berth-router passes them) and keepalive_requests
// raised so nginx does not close a client or upstream connection every 1000 requests,
// which Go's server and client never do; worker_processes 2 for the 2 cores.
const nginxConf = `worker_processes 2;
pid {{dir}}/nginx.pid;
error_log {{dir}}/error.log warn;
events { worker_connections 16384; }
http {
    access_log off;
    client_body_temp_path {{dir}}/body;
    proxy_temp_path {{dir}}/proxy;
    fastcgi_temp_path {{dir}}/fastcgi;
    uwsgi_temp_path {{dir}}/uwsgi;
    scgi_temp_path {{dir}}/scgi;
    keepalive_requests 1000000;
    upstream engines {
{{servers}}        keepalive 256;
        keepalive_requests 1000000;
    }
    server {
        listen {{listen}};
        location / {
            proxy_pass http://engines;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }
    }
}
`

func startNginx(bin string, upstreams []string) (*nginxProc, error) {
	dir, err := os.MkdirTemp("", "routerbench-nginx")
	if err != nil {
		return nil, err
	}
	// Workers run as nobody when the master is root: they must reach the temp dirs.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	listen, err := freePort()
	if err != nil {
		return nil, err
	}
	var servers strings.Builder
	for _, u := range upstreams {
		fmt.Fprintf(&servers, "        server %s;\n", u)
	}
	conf := strings.NewReplacer("{{dir}}", dir, "{{servers}}", servers.String(), "{{listen}}", listen).Replace(nginxConf)
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	n := &nginxProc{dir: dir, url: "http://" + listen + "/v1/chat/completions", exited: make(chan error, 1)}
	n.cmd = exec.Command(bin, "-p", dir, "-c", confPath, "-g", "daemon off;")
	n.cmd.Stdout, n.cmd.Stderr = &n.stderr, &n.stderr
	// nginx must not outlive the benchmark when it is killed.
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := n.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { n.exited <- n.cmd.Wait() }()
	for deadline := time.Now().Add(10 * time.Second); ; {
		select {
		case err := <-n.exited:
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			return nil, fmt.Errorf("nginx exited (%v): %s%s", err, n.stderr.String(), log)
		default:
		}
		if c, err := net.DialTimeout("tcp", listen, 100*time.Millisecond); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			n.cmd.Process.Kill()
			return nil, fmt.Errorf("nginx not listening on %s after 10s", listen)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return n, nil
}

// stop asks nginx to quit fast (SIGTERM) and waits for it; SIGKILL after 5s.
func (n *nginxProc) stop() {
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(5 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.exited
	}
	os.RemoveAll(n.dir)
}

// cpuSeconds is the CPU time nginx's master and workers have used so far, from /proc
// (clock ticks of 10ms: coarse, but a measurement runs for seconds).
func (n *nginxProc) cpuSeconds() float64 {
	pid := strconv.Itoa(n.cmd.Process.Pid)
	pids := []string{pid}
	if children, err := os.ReadFile("/proc/" + pid + "/task/" + pid + "/children"); err == nil {
		pids = append(pids, strings.Fields(string(children))...)
	}
	return processCPUSeconds(pids...)
}

// processCPUSeconds is the CPU time (user + system) the processes have used so far, from
// /proc; a process that is gone counts nothing.
func processCPUSeconds(pids ...string) float64 {
	var ticks int64
	for _, p := range pids {
		stat, err := os.ReadFile("/proc/" + p + "/stat")
		if err != nil {
			continue
		}
		// Fields after the ")" that ends the command name: state is field 3, utime 14, stime 15.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) > 12 {
			u, _ := strconv.ParseInt(f[11], 10, 64)
			s, _ := strconv.ParseInt(f[12], 10, 64)
			ticks += u + s
		}
	}
	return float64(ticks) / 100 // USER_HZ is 100 on Linux
}

// freePort returns a loopback address nobody listens on now.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
