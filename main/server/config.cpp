// SPDX-License-Identifier: Apache-2.0
#include "main/server/config.hpp"

#include "main/flags/token_file.hpp"
#include "persistence/batch.hpp"
#include "protocol/config.hpp"

#include <caf/deep_to_string.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>
#include <spdlog/spdlog.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

namespace chargeonce {

server_config::server_config() {
  opt_group{custom_options_, "global"}
    .add(port, "port,p",
         "all roles on 127.0.0.1, 0 picks a free one; not published when a "
         "role port is set (4242)")
    .add(gateway_port, "gateway-port",
         "gateway facade (touch, reserve, cancel, status, subscribe); "
         "-1 off, 0 any free port (-1)")
    .add(worker_port, "worker-port",
         "worker facade (start, heartbeat, commit, fail); -1 off (-1)")
    .add(admin_port, "admin-port",
         "admin facade (create-chat, top-up, set-premium, set-flags); "
         "-1 off (-1)")
    .add(bind, "bind", "address of the gateway and worker ports (127.0.0.1)")
    .add(admin_bind, "admin-bind", "address of the admin port (127.0.0.1)")
    .add(allow_plain_tcp, "allow-plain-tcp",
         "allow unencrypted ports beyond loopback (logs a warning)")
    .add(tls_cert, "tls-cert",
         "PEM certificate for the role ports; with tls-key and tls-ca they "
         "speak mutual TLS")
    .add(tls_key, "tls-key", "PEM private key of tls-cert")
    .add(tls_ca, "tls-ca",
         "PEM CA that every client certificate must be signed by")
    .add(postgres, "postgres",
         "libpq connection string; empty: embedded cluster under data-dir")
    .add(data_dir, "data-dir",
         "directory of the embedded Postgres cluster (var/postgres)")
    .add(connections, "connections",
         "Postgres connections serving chats, partitioned by chat (1)")
    .add(persistence_batch_max, "persistence-batch-max",
         "operations of different chats sharing one statement and commit, "
         "at most (128)")
    .add(persistence_queue_max, "persistence-queue-max",
         "operations waiting per connection, at most; beyond it callers get "
         "overloaded at once (4096)")
    .add(idle_timeout, "idle-timeout",
         "passivate a chat actor after this long without operations (60s)")
    .add(store_timeout, "store-timeout",
         "an operation waiting longer for Postgres is storage_unavailable "
         "(10s)")
    .add(statement_timeout, "statement-timeout",
         "Postgres statement_timeout of every connection (5s)")
    .add(sweep_interval, "sweep-interval",
         "how often reservations past their deadline are released (60s)")
    .add(max_job_duration, "max-job-duration",
         "the longest legal job, start to commit (60s)")
    .add(sweep_timeout, "sweep-timeout",
         "hard maximum age of a reservation; at least 2 x max-job-duration "
         "(3 x max-job-duration)")
    .add(lease_duration, "lease-duration",
         "how far one heartbeat extends a started job's lease (30s)")
    .add(queue_notice_delay, "queue-notice-delay",
         "publish queue_notice this long after a reserve if still active (5s)")
    .add(release_retention, "release-retention",
         "how long a released reservation answers expired (24h)")
    .add(event_retention, "event-retention",
         "how long an event is kept for subscribers that resume after it "
         "(24h)")
    .add(expiry_notice, "expiry-notice",
         "how long before a grant expires its chat gets credits_expiring "
         "(24h)")
    .add(balance_low_threshold, "balance-low-threshold",
         "a chat's available balance falling below this writes balance_low, "
         "unless the chat has its own (set-limits); 0 off (0)")
    .add(subscriber_timeout, "subscriber-timeout",
         "an event subscriber leaving an event unanswered this long is cut "
         "off; it resumes after its last event id (30s)")
    .add(refill_interval, "refill-interval",
         "a daily window this old is refilled by the chat's next activity "
         "(24h)")
    .add(reactivation_after, "reactivation-after",
         "started chats quiet this long are refilled and invited back (24h)")
    .add(reactivation_interval, "reactivation-interval",
         "how often the reactivation scan runs (1h)")
    .add(catalog_path, "catalog",
         "JSON file of the kinds of job and the pockets that pay for them "
         "(docs/configuration.md); empty: the built-in text and image")
    .add(free_daily_messages, "free-daily-messages",
         "free plan: daily text quota (10)")
    .add(free_daily_images, "free-daily-images",
         "free plan: daily image quota (3)")
    .add(premium_daily_messages, "premium-daily-messages",
         "premium plan: daily text quota, used only once premium lapses; "
         "premium text is free (10)")
    .add(premium_daily_images, "premium-daily-images",
         "premium plan: daily image quota (10)")
    .add(text_cancel_after_start, "text-cancel-after-start",
         "built-in catalog: a cancel of a started text job is refused "
         "(too_late) or asks its worker to stop: refuse|request (refuse)")
    .add(image_cancel_after_start, "image-cancel-after-start",
         "built-in catalog: the same for image jobs: refuse|request "
         "(refuse)")
    .add(free_max_active_jobs, "free-max-active-jobs",
         "free plan: jobs a chat may run at once unless it has its own limit, "
         "1 to 64 (1)")
    .add(premium_max_active_jobs, "premium-max-active-jobs",
         "premium plan: jobs a chat may run at once unless it has its own "
         "limit, 1 to 64 (1)")
    .add(reconcile_timeout, "reconcile-timeout",
         "a job of unknown outcome (uncertain) not resolved this long is "
         "released, nothing charged (24h)")
    .add(request_retention, "request-retention",
         "how long a job that ended is found by its request id; at least "
         "sweep-timeout (24h)")
    .add(http_port, "http-port",
         "HTTP/JSON adapter; -1 off, 0 any free port (-1)")
    .add(http_bind, "http-bind",
         "address of the HTTP port; beyond loopback it needs tls-cert/tls-key "
         "or allow-plain-tcp (127.0.0.1)")
    .add(http_gateway_token, "http-gateway-token",
         "bearer token of the gateway HTTP routes (at least 16 characters); "
         "empty: those routes answer 403")
    .add(http_worker_token, "http-worker-token",
         "bearer token of the worker HTTP routes")
    .add(http_admin_token, "http-admin-token",
         "bearer token of the admin HTTP routes")
    .add(http_gateway_token_file, "http-gateway-token-file",
         "read http-gateway-token from this file (first line)")
    .add(http_worker_token_file, "http-worker-token-file",
         "read http-worker-token from this file (first line)")
    .add(http_admin_token_file, "http-admin-token-file",
         "read http-admin-token from this file (first line)")
    .add(http_threads, "http-threads",
         "HTTP worker threads: connections served at once (8)")
    .add(http_max_streams, "http-max-streams",
         "concurrent GET /v1/events streams, below http-threads (4)")
    .add(http_max_body, "http-max-body",
         "largest HTTP request body in bytes; larger ones get 413 (65536)")
    .add(http_timeout, "http-timeout",
         "HTTP read, write and keep-alive idle timeout: a client stalling "
         "longer is dropped (5s)")
    .add(log_level, "log-level", "trace|debug|info|warn|error|off (info)")
    .add(port_file, "port-file", "write the bound port to this file");
  register_protocol(*this);
  load<caf::io::middleman>();
  load<caf::openssl::manager>(); // idle unless a port is published with TLS
  // Heartbeats let clients (e.g. `chargeonce-cli watch`) notice a frozen
  // server; a client's connection-timeout only works if the server sends
  // them. Overridable as --middleman.heartbeat-interval.
  set("middleman.heartbeat-interval", caf::timespan{std::chrono::seconds(1)});
  // Every operation crosses threads (network, chat actors, persistence).
  // Sharing instead of stealing: at 1 client, cycle p50 2.3 ms instead of
  // 3.5 ms. One worker instead of CAF's four on 2 cores (server and bench
  // client alike): 7,670 instead of 6,168 cycles/s at 64 clients, 553
  // instead of 458 at 1 (docs/performance-log.md).
  prefer_few_workers(*this);
  deserialize_on_middleman_thread(*this);
}

namespace {

std::string text(caf::timespan x) {
  return caf::deep_to_string(x);
}

bool is_loopback(const std::string& address) {
  return address.rfind("127.", 0) == 0 || address == "::1"
         || address == "localhost";
}

bool positive(caf::timespan x) {
  return x > caf::timespan{0};
}

} // namespace

std::string server_config::finalize_http() {
  if (http_port < -1 || http_port > 65535)
    return "http-port must be -1 (off) or 0 to 65535";
  for (auto [name, token, file] :
       {std::tuple{"http-gateway-token", &http_gateway_token,
                   &http_gateway_token_file},
        std::tuple{"http-worker-token", &http_worker_token,
                   &http_worker_token_file},
        std::tuple{"http-admin-token", &http_admin_token,
                   &http_admin_token_file}}) {
    if (!file->empty()) {
      if (!token->empty())
        return std::string{name} + " and " + name + "-file are exclusive";
      if (auto problem = read_token_file(*file, *token); !problem.empty())
        return std::string{name} + "-file: " + problem;
      if (token->empty())
        return std::string{name} + "-file: " + *file + " is empty";
    }
    // A short token can be guessed; 16 characters is the least we take.
    if (!token->empty() && token->size() < 16)
      return std::string{name} + " must have at least 16 characters";
  }
  // One token for two roles would let a gateway commit.
  const auto& g = http_gateway_token;
  const auto& w = http_worker_token;
  const auto& a = http_admin_token;
  if ((!g.empty() && (g == w || g == a)) || (!w.empty() && w == a))
    return "the HTTP tokens of different roles must differ";
  if (http_threads < 2)
    return "http-threads must be at least 2";
  if (http_max_streams >= http_threads)
    return "http-max-streams must be below http-threads (streams hold a "
           "thread each)";
  if (http_max_body < 1024)
    return "http-max-body must be at least 1024";
  if (http_timeout < std::chrono::seconds(1))
    return "http-timeout must be at least 1s";
  if (http() && !is_loopback(http_bind) && !tls() && !allow_plain_tcp)
    return "refusing plain HTTP on " + http_bind
           + ": bind to loopback, give tls-cert/tls-key/tls-ca, or pass "
             "--allow-plain-tcp (e.g. behind a TLS reverse proxy)";
  return {};
}

namespace {

/// The built-in kinds' cancel_after_start options.
struct policy_option {
  const char* name;
  const std::string* value; ///< empty: not given (refuse)
};

} // namespace

catalog server_config::builtin_products() const {
  auto out = builtin_catalog({free_daily_messages, free_daily_images,
                              premium_daily_messages, premium_daily_images});
  // finalize() refused a value other than refuse or request.
  for (auto& spec : out.kinds)
    if (spec.name == "text")
      from_string(text_cancel_after_start, spec.cancel_after_start);
    else if (spec.name == "image")
      from_string(image_cancel_after_start, spec.cancel_after_start);
  return out;
}

std::string server_config::finalize_catalog() {
  const policy_option policies[] = {
    {"text-cancel-after-start", &text_cancel_after_start},
    {"image-cancel-after-start", &image_cancel_after_start}};
  cancel_policy parsed;
  for (const auto& option : policies)
    if (!option.value->empty() && !from_string(*option.value, parsed))
      return std::string{option.name} + " must be refuse or request, not '"
             + *option.value + "'";
  if (catalog_path.empty()) {
    products_ = builtin_products();
    return {};
  }
  // A file's kinds say their own policy: an option beside it would be
  // silently ignored.
  for (const auto& option : policies)
    if (!option.value->empty())
      return std::string{option.name}
             + " applies to the built-in catalog only: set cancel_after_start "
               "in "
             + catalog_path;
  std::ifstream in{catalog_path};
  std::stringstream text;
  text << in.rdbuf();
  if (!in)
    return "cannot read catalog " + catalog_path;
  if (auto problem = parse_catalog(text.str(), products_); !problem.empty())
    return "catalog " + catalog_path + ": " + problem;
  return {};
}

namespace {

/// "30d" as "720h"; any other value as it is (CAF parses it, or refuses it).
std::string days_as_hours(const std::string& value) {
  static const std::regex days{"(0|[1-9][0-9]{0,6})d"};
  std::smatch m;
  if (!std::regex_match(value, m, days))
    return value;
  return std::to_string(std::stoll(m[1].str()) * 24) + "h";
}

/// The names of the options that are durations.
std::set<std::string> duration_options(const caf::config_option_set& opts) {
  std::set<std::string> out;
  for (const auto& x : opts)
    if (x.type_name() == "timespan")
      out.emplace(x.long_name().begin(), x.long_name().end());
  return out;
}

/// The config file's text, each `name = <N>d` of a duration as hours;
/// empty when there is no file (as CAF, which then reads nothing).
std::string config_text_with_days(const std::string& path,
                                  const std::set<std::string>& durations) {
  std::ifstream in{path};
  static const std::regex line{
    R"(^(\s*)([A-Za-z0-9_.-]+)(\s*=\s*)([^\s;]+)(.*)$)"};
  std::string out;
  std::string text;
  while (std::getline(in, text)) {
    std::smatch m;
    if (std::regex_match(text, m, line) && durations.count(m[2].str()) > 0)
      text = m[1].str() + m[2].str() + m[3].str() + days_as_hours(m[4].str())
             + m[5].str();
    out += text + "\n";
  }
  return out;
}

} // namespace

caf::error server_config::parse_with_days(int argc, char** argv) {
  auto durations = duration_options(custom_options_);
  caf::actor_system_config::string_list args;
  std::string path = config_file_path;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      auto name = arg.substr(2, eq - 2);
      if (name == "config-file")
        path = arg.substr(eq + 1);
      else if (durations.count(name) > 0)
        arg = arg.substr(0, eq + 1) + days_as_hours(arg.substr(eq + 1));
    }
    args.push_back(std::move(arg));
  }
  std::istringstream ini{config_text_with_days(path, durations)};
  return parse(std::move(args), ini);
}

std::string server_config::finalize() {
  if (sweep_timeout == caf::timespan{0})
    sweep_timeout = 3 * max_job_duration;
  for (auto [name, value] :
       {std::pair{"idle-timeout", idle_timeout},
        std::pair{"store-timeout", store_timeout},
        std::pair{"statement-timeout", statement_timeout},
        std::pair{"sweep-interval", sweep_interval},
        std::pair{"max-job-duration", max_job_duration},
        std::pair{"lease-duration", lease_duration},
        std::pair{"queue-notice-delay", queue_notice_delay},
        std::pair{"release-retention", release_retention},
        std::pair{"event-retention", event_retention},
        std::pair{"expiry-notice", expiry_notice},
        std::pair{"subscriber-timeout", subscriber_timeout},
        std::pair{"request-retention", request_retention},
        std::pair{"reconcile-timeout", reconcile_timeout},
        std::pair{"refill-interval", refill_interval},
        std::pair{"reactivation-after", reactivation_after},
        std::pair{"reactivation-interval", reactivation_interval}})
    if (!positive(value))
      return std::string{name} + " must be positive";
  // Too short a sweep-timeout unlocks a live job: the user starts a second
  // one, and the first comes back and charges for itself.
  if (sweep_timeout < 2 * max_job_duration)
    return "sweep-timeout (" + text(sweep_timeout)
           + ") must be at least 2 x max-job-duration ("
           + text(max_job_duration) + "), i.e. " + text(2 * max_job_duration);
  // A retried reserve may come as late as the job can live: its request id
  // must be remembered at least that long after the job ended.
  if (request_retention < sweep_timeout)
    return "request-retention (" + text(request_retention)
           + ") must be at least sweep-timeout (" + text(sweep_timeout) + ")";
  for (auto [name, value] :
       {std::pair{"free-max-active-jobs", free_max_active_jobs},
        std::pair{"premium-max-active-jobs", premium_max_active_jobs}})
    if (value < max_active_jobs_min || value > max_active_jobs_max)
      return std::string{name} + " must be between 1 and 64";
  if (balance_low_threshold < 0)
    return "balance-low-threshold must be 0 (off) or more";
  for (auto [name, value] :
       {std::pair{"free-daily-messages", free_daily_messages},
        std::pair{"free-daily-images", free_daily_images},
        std::pair{"premium-daily-messages", premium_daily_messages},
        std::pair{"premium-daily-images", premium_daily_images}})
    if (value < 0)
      return std::string{name} + " must not be negative";
  for (auto [name, value] : {std::pair{"gateway-port", gateway_port},
                             std::pair{"worker-port", worker_port},
                             std::pair{"admin-port", admin_port}})
    if (value < -1 || value > 65535)
      return std::string{name} + " must be -1 (off) or 0 to 65535";
  auto tls_files =
    int{!tls_cert.empty()} + int{!tls_key.empty()} + int{!tls_ca.empty()};
  if (tls_files != 0 && tls_files != 3)
    return "TLS needs all of tls-cert, tls-key and tls-ca";
  if (tls()) {
    // CAF's OpenSSL module: any of these keys makes peer certificates
    // mandatory on both sides (mutual TLS).
    set("openssl.certificate", tls_cert);
    set("openssl.key", tls_key);
    set("openssl.cafile", tls_ca);
  }
  // Plain TCP carries billing commands unauthenticated: only on loopback,
  // unless the operator says otherwise in so many words.
  for (const auto& address : {bind, admin_bind})
    if (!is_loopback(address) && !tls() && !allow_plain_tcp)
      return "refusing plain TCP on " + address
             + ": bind to loopback or pass --allow-plain-tcp";
  if (connections == 0)
    return "connections must be at least 1";
  if (persistence_batch_max == 0
      || persistence_batch_max > persistence::statement_operations_max)
    return "persistence-batch-max must be 1.."
           + std::to_string(persistence::statement_operations_max);
  if (persistence_queue_max == 0)
    return "persistence-queue-max must be at least 1";
  if (auto problem = finalize_http(); !problem.empty())
    return problem;
  if (auto problem = finalize_catalog(); !problem.empty())
    return problem;
  if (spdlog::level::from_str(log_level) == spdlog::level::off
      && log_level != "off")
    return "unknown log-level '" + log_level + "'";
  return {};
}

} // namespace chargeonce
