// llm-server-sim: a look-alike of llama.cpp's llama-server, the demo and
// end-to-end target for retain's request tagging. No model: the "inference"
// allocates like a server with a prompt cache and (with --leak-trie) an
// orphaned prefix trie. See README.md for what each owner keeps per request.
//
// Threads, as in llama-server: httplib's pool of --http-threads HTTP workers
// parse requests, post a Task to the TaskQueue and block on the ResultQueue;
// one inference thread does all the model work; one thread waits for
// SIGINT/SIGTERM (blocked in every other thread) and stops the server. main
// then terminates the queue, joins everything and returns 0.
//
//   llm-server-sim --port 0 [--state-mib 8] [--cache-mib 32] [--leak-trie]
//                  [--trie-node-kib 256] [--http-threads 4] [--parallel 1]
//                  [--stream-chunks 8] [--stream-delay-ms 0] [--host 127.0.0.1]
#include <arpa/inet.h>
#include <httplib.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "inference.h"

namespace retain::examples {
namespace {

struct Flags {
  std::string host = "127.0.0.1";
  int port = 8080;
  int http_threads = 4;
  int stream_chunks = 8;    // SSE events per streamed answer (before [DONE])
  int stream_delay_ms = 0;  // between two of them
  SimOptions sim;
};

constexpr char kUsage[] =
    "usage: llm-server-sim [--host 127.0.0.1] [--port N (0 = any free port)]\n"
    "                      [--state-mib 8] [--state-kib-per-char 0]\n"
    "                      [--cache-mib 32 (0 = no prompt cache)]\n"
    "                      [--leak-trie] [--trie-node-kib 256] [--http-threads 4]\n"
    "                      [--parallel 1] [--stream-chunks 8] [--stream-delay-ms 0]\n";

bool ParseSize(const char* text, long min, long max, long* out) {
  char* end = nullptr;
  errno = 0;
  long value = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < min || value > max) return false;
  *out = value;
  return true;
}

// Loopback only: 127.0.0.0/8, ::1 or "localhost".
bool IsLoopback(const std::string& host) {
  if (host == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

// Returns false (after saying why) on a bad command line.
bool ParseFlags(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (arg == "--leak-trie") {
      flags->sim.leak_trie = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "llm-server-sim: unknown flag or missing value: %s\n%s", arg.c_str(),
                   kUsage);
      return false;
    }
    const char* value = argv[++i];
    long number = 0;
    bool ok = true;
    if (arg == "--host") {
      flags->host = value;
    } else if (arg == "--port") {
      ok = ParseSize(value, 0, 65535, &number);
      flags->port = static_cast<int>(number);
    } else if (arg == "--state-mib") {
      ok = ParseSize(value, 1, 1 << 16, &number);
      flags->sim.state_bytes = static_cast<size_t>(number) * kMiB;
    } else if (arg == "--state-kib-per-char") {
      ok = ParseSize(value, 0, 1 << 10, &number);
      flags->sim.state_bytes_per_char = static_cast<size_t>(number) * kKiB;
    } else if (arg == "--cache-mib") {
      ok = ParseSize(value, 0, 1 << 20, &number);
      flags->sim.cache_bytes = static_cast<size_t>(number) * kMiB;
    } else if (arg == "--trie-node-kib") {
      ok = ParseSize(value, 1, 1 << 20, &number);
      flags->sim.trie_node_bytes = static_cast<size_t>(number) * kKiB;
    } else if (arg == "--http-threads") {
      ok = ParseSize(value, 1, 256, &number);
      flags->http_threads = static_cast<int>(number);
    } else if (arg == "--parallel") {
      ok = ParseSize(value, 1, 64, &number);
      flags->sim.parallel = static_cast<size_t>(number);
    } else if (arg == "--stream-chunks") {
      ok = ParseSize(value, 1, 4096, &number);
      flags->stream_chunks = static_cast<int>(number);
    } else if (arg == "--stream-delay-ms") {
      ok = ParseSize(value, 0, 10000, &number);
      flags->stream_delay_ms = static_cast<int>(number);
    } else {
      std::fprintf(stderr, "llm-server-sim: unknown flag %s\n%s", arg.c_str(), kUsage);
      return false;
    }
    if (!ok) {
      std::fprintf(stderr, "llm-server-sim: bad value for %s: %s\n", arg.c_str(), value);
      return false;
    }
  }
  if (!IsLoopback(flags->host)) {
    std::fprintf(stderr, "llm-server-sim: refusing --host %s: loopback addresses only\n",
                 flags->host.c_str());
    return false;
  }
  return true;
}

// The string value of "key" in a JSON object (its first occurrence, or with
// `last` its last: the newest message of a chat), with the common escapes
// decoded (\uXXXX becomes '?'). Enough for {"prompt": "..."} and
// {"messages": [..., {"role": "user", "content": "..."}]}; not a parser.
bool ExtractJsonString(const std::string& body, const std::string& key, std::string* out,
                       bool last = false) {
  std::string quoted = "\"" + key + "\"";
  size_t at = last ? body.rfind(quoted) : body.find(quoted);
  if (at == std::string::npos) return false;
  at = body.find_first_not_of(" \t\r\n", at + quoted.size());
  if (at == std::string::npos || body[at] != ':') return false;
  at = body.find_first_not_of(" \t\r\n", at + 1);
  if (at == std::string::npos || body[at] != '"') return false;
  out->clear();
  for (++at; at < body.size(); ++at) {
    char c = body[at];
    if (c == '"') return true;
    if (c != '\\') {
      out->push_back(c);
      continue;
    }
    if (++at >= body.size()) return false;
    switch (body[at]) {
      case 'n':
        out->push_back('\n');
        break;
      case 't':
        out->push_back('\t');
        break;
      case 'r':
        out->push_back('\r');
        break;
      case 'b':
        out->push_back('\b');
        break;
      case 'f':
        out->push_back('\f');
        break;
      case 'u':
        if (at + 4 >= body.size()) return false;
        at += 4;
        out->push_back('?');
        break;
      default:
        out->push_back(body[at]);
        break;  // \" \\ \/
    }
  }
  return false;  // unterminated
}

// True when the body asks for "stream": true.
bool WantsStream(const std::string& body) {
  size_t at = body.find("\"stream\"");
  if (at == std::string::npos) return false;
  at = body.find_first_not_of(" \t\r\n", at + 8);
  if (at == std::string::npos || body[at] != ':') return false;
  at = body.find_first_not_of(" \t\r\n", at + 1);
  return at != std::string::npos && body.compare(at, 4, "true") == 0;
}

std::string JsonEscape(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
      out += buffer;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

int Main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) return 2;

  // Block SIGINT/SIGTERM before any thread starts, so every thread inherits
  // the mask and only the signal thread (sigwait) receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  TaskQueue tasks;
  ResultQueue results;
  std::atomic<uint64_t> next_task_id{1};

  httplib::Server server;
  int http_threads = flags.http_threads;
  server.new_task_queue = [http_threads] { return new httplib::ThreadPool(http_threads); };
  server.set_keep_alive_max_count(1000);

  server.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"status\":\"ok\"}", "application/json");
  });
  server.Post("/completion", [&](const httplib::Request& req, httplib::Response& res) {
    Task task;
    if (!ExtractJsonString(req.body, "prompt", &task.prompt)) {
      res.status = 400;
      res.set_content("{\"error\":\"expected a JSON body with a \\\"prompt\\\" string\"}",
                      "application/json");
      return;
    }
    task.id = next_task_id.fetch_add(1);
    task.request_id = req.get_header_value("X-Request-Id");
    uint64_t id = task.id;
    tasks.Post(std::move(task));
    TaskResult result = results.Wait(id);
    res.set_content("{\"content\":\"" + JsonEscape(result.content) +
                        "\",\"tokens\":" + std::to_string(result.tokens) +
                        ",\"cache_entries\":" + std::to_string(result.cache_entries) + "}",
                    "application/json");
  });
  // OpenAI-style chat: the last message's content is the prompt. With
  // "stream": true the answer goes out as server-sent events, chunked, one
  // event per piece of the answer and a final "data: [DONE]", as
  // llama-server streams.
  server.Post("/v1/chat/completions", [&](const httplib::Request& req, httplib::Response& res) {
    Task task;
    if (!ExtractJsonString(req.body, "content", &task.prompt, /*last=*/true)) {
      res.status = 400;
      res.set_content("{\"error\":\"expected a JSON body with messages that have content\"}",
                      "application/json");
      return;
    }
    task.id = next_task_id.fetch_add(1);
    task.request_id = req.get_header_value("X-Request-Id");
    uint64_t id = task.id;
    tasks.Post(std::move(task));
    TaskResult result = results.Wait(id);
    if (!WantsStream(req.body)) {
      res.set_content(
          "{\"object\":\"chat.completion\",\"choices\":[{\"message\":{\"role\":"
          "\"assistant\",\"content\":\"" +
              JsonEscape(result.content) +
              "\"}}],\"usage\":{\"prompt_tokens\":" + std::to_string(result.tokens) + "}}",
          "application/json");
      return;
    }
    const int chunks = flags.stream_chunks;
    const int delay_ms = flags.stream_delay_ms;
    const std::string content = result.content;
    res.set_chunked_content_provider(
        "text/event-stream", [content, chunks, delay_ms](size_t, httplib::DataSink& sink) {
          const size_t piece = (content.size() + chunks - 1) / chunks;
          for (int i = 0; i < chunks; ++i) {
            if (i > 0 && delay_ms > 0) {
              std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
            }
            const size_t from = std::min(content.size(), i * piece);
            const std::string event =
                "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"delta\":"
                "{\"content\":\"" +
                JsonEscape(content.substr(from, piece)) + "\"}}]}\n\n";
            if (!sink.write(event.data(), event.size())) return false;  // the client left
          }
          const std::string done = "data: [DONE]\n\n";
          if (!sink.write(done.data(), done.size())) return false;
          sink.done();
          return true;
        });
  });

  int port = flags.port;
  if (port == 0) {
    port = server.bind_to_any_port(flags.host);
    if (port < 0) port = 0;
  } else if (!server.bind_to_port(flags.host, port)) {
    port = 0;
  }
  if (port == 0) {
    std::fprintf(stderr, "llm-server-sim: cannot listen on %s:%d\n", flags.host.c_str(),
                 flags.port);
    return 1;
  }

  const SimOptions& sim = flags.sim;
  PromptCache sizing(sim.cache_bytes, sim.state_bytes);
  std::fprintf(stderr,
               "llm-server-sim: http threads %d, %zu slots; per request: %zu-byte working buffer "
               "(freed); "
               "prompt cache: %zu-byte states, budget %zu bytes, at most %zu entries%s; "
               "trie: %s\n",
               flags.http_threads, sim.parallel, kWorkBufferBytes, sim.state_bytes, sim.cache_bytes,
               sizing.capacity_entries(), sizing.capacity_entries() == 0 ? " (disabled)" : "",
               sim.leak_trie ? "on, one never-freed node per 16 prompt characters" : "off");
  if (sim.leak_trie) {
    std::fprintf(stderr, "llm-server-sim: trie node payload %zu bytes\n", sim.trie_node_bytes);
  }

  InferenceLoop loop(sim, &tasks, &results);
  std::thread inference([&loop] { loop.Run(); });

  std::atomic<bool> listen_done{false};
  std::thread signal_waiter([&] {
    int signal_number = 0;
    sigwait(&stop_signals, &signal_number);
    if (listen_done.load()) return;  // woken by main
    std::fprintf(stderr, "llm-server-sim: signal %d, stopping\n", signal_number);
    // stop() is a no-op until listen_after_bind has started.
    while (!server.is_running() && !listen_done.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    server.stop();
  });

  std::printf("listening on %s:%d\n", flags.host.c_str(), port);
  std::fflush(stdout);
  bool ok = server.listen_after_bind();  // returns after stop(), HTTP threads joined

  listen_done.store(true);
  pthread_kill(signal_waiter.native_handle(), SIGTERM);  // no-op if it already returned
  signal_waiter.join();
  tasks.Terminate();
  inference.join();
  std::fprintf(stderr, "llm-server-sim: stopped\n");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace retain::examples

int main(int argc, char** argv) { return retain::examples::Main(argc, argv); }
