package inproc

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func client(h http.HandlerFunc) *http.Client {
	return &http.Client{Transport: &Transport{Handler: h}}
}

func TestStatusHeadersAndBody(t *testing.T) {
	c := client(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Seen", r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery+" "+r.Header.Get("Authorization")+" "+string(b))
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "made")
		w.Header().Set("X-Late", "ignored")
	})
	req, _ := http.NewRequest("POST", "http://api.inproc/v1/things?x=1", strings.NewReader("in"))
	req.Header.Set("Authorization", "Bearer t")
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	got, _ := io.ReadAll(res.Body)
	if res.StatusCode != 201 || string(got) != "made" {
		t.Fatalf("status %d body %q", res.StatusCode, got)
	}
	if s := res.Header.Get("X-Seen"); s != "POST /v1/things?x=1 Bearer t in" {
		t.Fatalf("handler saw %q", s)
	}
	if res.Header.Get("X-Late") != "" {
		t.Fatal("a header set after WriteHeader reached the client")
	}
}

func TestHandlerThatWritesNothingIs200(t *testing.T) {
	res, err := client(func(http.ResponseWriter, *http.Request) {}).Get("http://x/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("status %d", res.StatusCode)
	}
}

func TestStreamingAndCloseCancelsHandler(t *testing.T) {
	ended := make(chan error, 1)
	c := client(func(w http.ResponseWriter, r *http.Request) {
		for {
			if _, err := io.WriteString(w, "tick\n"); err != nil {
				ended <- r.Context().Err()
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				ended <- r.Context().Err()
				return
			case <-time.After(time.Millisecond):
			}
		}
	})
	res, err := c.Get("http://x/follow")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(res.Body, buf); err != nil || string(buf) != "tick\n" {
		t.Fatalf("read %q, %v", buf, err)
	}
	res.Body.Close() // waits for the handler
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("handler ended with %v, want its context cancelled", err)
		}
	default:
		t.Fatal("Close returned before the handler did")
	}
}

func TestPanicFailsTheBody(t *testing.T) {
	res, err := client(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "part")
		panic("boom")
	}).Get("http://x/")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if _, err := io.ReadAll(res.Body); !errors.Is(err, ErrAborted) {
		t.Fatalf("body error %v, want ErrAborted", err)
	}
	res2, err := client(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }).Get("http://x/")
	if err != nil {
		t.Fatal(err)
	}
	defer res2.Body.Close()
	if res2.StatusCode != 500 {
		t.Fatalf("status %d before any header, want 500", res2.StatusCode)
	}
}

func TestCallerCancelsBeforeHeaders(t *testing.T) {
	release := make(chan struct{})
	c := client(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
		close(release)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://x/", nil)
	if _, err := c.Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the deadline", err)
	}
	<-release
}

// A body of unknown length (a client's ContentLength 0 with a body) is
// one of unknown length for the handler too (-1), not an empty one: what
// reads it by the length (netlimit's guard, MaxBytesReader users) must
// read it all.
func TestBodyOfUnknownLength(t *testing.T) {
	c := client(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, strconv.FormatInt(r.ContentLength, 10)+" "+string(b))
	})
	for _, c2 := range []struct {
		body io.Reader
		want string
	}{
		{io.MultiReader(strings.NewReader("streamed")), "-1 streamed"},
		{strings.NewReader("known"), "5 known"},
		{nil, "0 "},
	} {
		req, _ := http.NewRequest("PUT", "http://api.inproc/x", c2.body)
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if string(got) != c2.want {
			t.Fatalf("handler saw %q, want %q", got, c2.want)
		}
	}
}
