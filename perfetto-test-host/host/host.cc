// The test host: Perfetto's own tracing service (the code `traced` runs) and
// consumer sessions through Perfetto's C API, in one process, for ringtrace's
// system-tracing tests. Built by this crate's build script from the
// amalgamated source of the `perfetto-sdk-sys` crate, never shipped.
//
// Usage: perfetto-test-host PRODUCER_SOCKETS CONSUMER_SOCKET
//   PRODUCER_SOCKETS: comma-separated listen addresses (a path, host:port or
//                     vsock://CID:PORT)
//   CONSUMER_SOCKET: a path
// Prints "ready" once both sockets listen, then reads commands on stdin, one a
// line, and answers each with one line ("ok ..." or "error ..."):
//   start NAME CONFIG_HEX   set up and start a session from a TraceConfig
//   flush NAME TIMEOUT_MS   ask every data source to flush; "ok 1" if all acked
//   stop NAME PATH          stop the session and write its whole trace to PATH
//   query                   the service's state (QueryServiceState of a
//                           consumer endpoint): "ok " + one line of JSON,
//                           {"producers":[{"id","name"}],"data_sources":
//                           [{"producer_id","name","id","categories":[..]}]}
//   quit                    exit
#include "perfetto_c.cc"

#include <stdio.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Session {
  PerfettoTracingSessionImpl* impl = nullptr;
  std::mutex mu;
  std::condition_variable cv;
  bool stopped = false;
};

void OnStop(PerfettoTracingSessionImpl*, void* arg) {
  Session* s = static_cast<Session*>(arg);
  std::lock_guard<std::mutex> lock(s->mu);
  s->stopped = true;
  s->cv.notify_all();
}

void OnRead(PerfettoTracingSessionImpl*, const void* data, size_t size, bool,
            void* arg) {
  auto* out = static_cast<std::vector<char>*>(arg);
  const char* bytes = static_cast<const char*>(data);
  out->insert(out->end(), bytes, bytes + size);
}

bool FromHex(const std::string& hex, std::vector<uint8_t>* out) {
  if (hex.size() % 2 != 0) return false;
  for (size_t i = 0; i < hex.size(); i += 2) {
    unsigned v = 0;
    if (sscanf(hex.c_str() + i, "%2x", &v) != 1) return false;
    out->push_back(static_cast<uint8_t>(v));
  }
  return true;
}

void Answer(const std::string& line) {
  std::cout << line << std::endl;
}

// A consumer of the service in this process, only to query its state: every
// callback of a session is ignored.
class StateConsumer : public perfetto::Consumer {
 public:
  void OnConnect() override {}
  void OnDisconnect() override {}
  void OnTracingDisabled(const std::string&) override {}
  void OnTraceData(std::vector<perfetto::TracePacket>, bool) override {}
  void OnDetach(bool) override {}
  void OnAttach(bool, const perfetto::TraceConfig&) override {}
  void OnTraceStats(bool, const perfetto::TraceStats&) override {}
  void OnObservableEvents(const perfetto::ObservableEvents&) override {}
};

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// The producers and data sources the service knows, with the categories of
// each track_event descriptor, as one line of JSON.
std::string StateJson(const perfetto::protos::gen::TracingServiceState& st) {
  std::string out = "{\"producers\":[";
  bool first = true;
  for (const auto& p : st.producers()) {
    out += first ? "" : ",";
    first = false;
    out += "{\"id\":" + std::to_string(p.id()) + ",\"name\":" + JsonString(p.name()) + "}";
  }
  out += "],\"data_sources\":[";
  first = true;
  for (const auto& ds : st.data_sources()) {
    const auto& d = ds.ds_descriptor();
    out += first ? "" : ",";
    first = false;
    out += "{\"producer_id\":" + std::to_string(ds.producer_id()) +
           ",\"name\":" + JsonString(d.name()) +
           ",\"id\":" + std::to_string(d.id()) + ",\"categories\":[";
    perfetto::protos::gen::TrackEventDescriptor ted;
    const std::string& raw = d.track_event_descriptor_raw();
    if (!raw.empty()) ted.ParseFromArray(raw.data(), raw.size());
    bool first_cat = true;
    for (const auto& c : ted.available_categories()) {
      out += first_cat ? "" : ",";
      first_cat = false;
      out += JsonString(c.name());
    }
    out += "]}";
  }
  return out + "]}";
}

// Removes a stale socket file left by an earlier (killed) host, as traced does.
void RemoveStaleSockets(const std::string& list) {
  std::stringstream ss(list);
  std::string name;
  while (std::getline(ss, name, ',')) {
    if (!name.empty() && name[0] == '/') unlink(name.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s PRODUCER_SOCKETS CONSUMER_SOCKET\n", argv[0]);
    return 2;
  }
  const std::string producer_sockets = argv[1];
  const std::string consumer_socket = argv[2];
  RemoveStaleSockets(producer_sockets);
  RemoveStaleSockets(consumer_socket);

  perfetto::base::UnixTaskRunner task_runner;
  std::unique_ptr<perfetto::ServiceIPCHost> host;
  StateConsumer state_consumer;
  std::unique_ptr<perfetto::TracingService::ConsumerEndpoint> state_endpoint;
  std::mutex started_mu;
  std::condition_variable started_cv;
  int started = 0;  // 0 pending, 1 listening, -1 failed
  std::thread service_thread([&] {
    task_runner.PostTask([&] {
      host = perfetto::ServiceIPCHost::CreateInstance(&task_runner);
      bool ok = host->Start(producer_sockets.c_str(), consumer_socket.c_str());
      if (ok) state_endpoint = host->service()->ConnectConsumer(&state_consumer, getuid());
      std::lock_guard<std::mutex> lock(started_mu);
      started = ok ? 1 : -1;
      started_cv.notify_all();
    });
    task_runner.Run();
  });
  {
    std::unique_lock<std::mutex> lock(started_mu);
    started_cv.wait(lock, [&] { return started != 0; });
  }
  if (started < 0) {
    fprintf(stderr, "perfetto-test-host: cannot listen on %s / %s\n",
            producer_sockets.c_str(), consumer_socket.c_str());
    _exit(1);
  }

  // The consumer side: Perfetto's C API over the system backend, which reads
  // the socket names from the environment.
  std::string first_producer = producer_sockets.substr(0, producer_sockets.find(','));
  setenv("PERFETTO_PRODUCER_SOCK_NAME", first_producer.c_str(), 1);
  setenv("PERFETTO_CONSUMER_SOCK_NAME", consumer_socket.c_str(), 1);
  PerfettoProducerBackendInitArgs* args = PerfettoProducerBackendInitArgsCreate();
  PerfettoProducerSystemInit(args);
  PerfettoProducerBackendInitArgsDestroy(args);
  Answer("ready");

  std::map<std::string, std::unique_ptr<Session>> sessions;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::stringstream ss(line);
    std::string cmd, name;
    ss >> cmd >> name;
    if (cmd == "quit") break;
    if (cmd == "start") {
      std::string hex;
      ss >> hex;
      std::vector<uint8_t> cfg;
      if (!FromHex(hex, &cfg) || sessions.count(name)) {
        Answer("error bad start");
        continue;
      }
      auto s = std::make_unique<Session>();
      s->impl = PerfettoTracingSessionSystemCreate();
      PerfettoTracingSessionSetup(s->impl, cfg.data(), cfg.size());
      PerfettoTracingSessionSetStopCb(s->impl, OnStop, s.get());
      PerfettoTracingSessionStartBlocking(s->impl);
      sessions[name] = std::move(s);
      Answer("ok");
    } else if (cmd == "flush") {
      uint32_t timeout_ms = 0;
      ss >> timeout_ms;
      auto it = sessions.find(name);
      if (it == sessions.end()) {
        Answer("error no session");
        continue;
      }
      bool ok = PerfettoTracingSessionFlushBlocking(it->second->impl, timeout_ms);
      Answer(ok ? "ok 1" : "ok 0");
    } else if (cmd == "stop") {
      std::string path;
      ss >> path;
      auto it = sessions.find(name);
      if (it == sessions.end()) {
        Answer("error no session");
        continue;
      }
      Session* s = it->second.get();
      PerfettoTracingSessionStopAsync(s->impl);
      bool stopped;
      {
        std::unique_lock<std::mutex> lock(s->mu);
        stopped = s->cv.wait_for(lock, std::chrono::seconds(30),
                                 [&] { return s->stopped; });
      }
      if (!stopped) {
        Answer("error stop timed out");
        continue;
      }
      std::vector<char> trace;
      PerfettoTracingSessionReadTraceBlocking(s->impl, OnRead, &trace);
      FILE* f = fopen(path.c_str(), "wb");
      if (!f || fwrite(trace.data(), 1, trace.size(), f) != trace.size()) {
        Answer("error cannot write trace");
        if (f) fclose(f);
        continue;
      }
      fclose(f);
      PerfettoTracingSessionDestroy(s->impl);
      sessions.erase(it);
      Answer("ok " + std::to_string(trace.size()));
    } else if (cmd == "query") {
      // Asked on the service's thread; the answer comes back to this one.
      struct Query {
        std::mutex mu;
        std::condition_variable cv;
        bool done = false;
        std::string json;
      };
      auto q = std::make_shared<Query>();
      task_runner.PostTask([&state_endpoint, q] {
        state_endpoint->QueryServiceState(
            {}, [q](bool success, const perfetto::protos::gen::TracingServiceState& st) {
              std::lock_guard<std::mutex> lock(q->mu);
              if (success) q->json = StateJson(st);
              q->done = true;
              q->cv.notify_all();
            });
      });
      std::unique_lock<std::mutex> lock(q->mu);
      bool done = q->cv.wait_for(lock, std::chrono::seconds(10), [&] { return q->done; });
      Answer(!done ? "error query timed out"
                   : q->json.empty() ? "error query failed" : "ok " + q->json);
    } else {
      Answer("error unknown command");
    }
  }
  // The service and the SDK's threads are not torn down in order; the tests
  // only need the process gone.
  fflush(stdout);
  _exit(0);
}
