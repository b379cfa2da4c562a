// SPDX-License-Identifier: Apache-2.0
#include "tools/chaos/worker_process.hpp"

#include "client/client.hpp"
#include "protocol/errors.hpp"
#include "protocol/time.hpp"

#include <caf/all.hpp>

#include <cstdio>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace chargeonce::chaos {

namespace {

constexpr auto child_timeout = std::chrono::seconds(4);
constexpr auto child_pace = std::chrono::milliseconds(300);

/// "S op chat id key sent_us": written (and flushed) before the request.
void announce(op what, chat_id chat, reservation_id id, uint64_t key) {
  std::printf("S %d %lld %lld %llu %lld\n", static_cast<int>(what),
              static_cast<long long>(chat), static_cast<long long>(id),
              static_cast<unsigned long long>(key),
              static_cast<long long>(now_us()));
  std::fflush(stdout);
}

/// A hold as one word: "name=amount,name=amount", "-" for none.
std::string pockets_word(const pockets& x) {
  std::string out;
  for (const auto& [name, amount] : x.items())
    out += (out.empty() ? "" : ",") + name + "=" + std::to_string(amount);
  return out.empty() ? "-" : out;
}

/// pockets_word's inverse; false for a malformed word.
bool read_pockets_word(const std::string& word, pockets& out) {
  out = pockets{};
  if (word == "-")
    return true;
  std::istringstream in{word};
  for (std::string item; std::getline(in, item, ',');) {
    auto eq = item.find('=');
    if (eq == std::string::npos)
      return false;
    try {
      out.set(item.substr(0, eq), std::stoi(item.substr(eq + 1)));
    } catch (const std::exception&) {
      return false;
    }
  }
  return true;
}

/// "A result id created_us acked_us held ." after the answer; the final
/// "." tells a whole line from one cut by the kill.
void report(const caf::expected<reservation>& x) {
  op_record r;
  if (x) {
    r.result = static_cast<uint8_t>(outcome::ok);
    r.id = x->id;
    r.amounts = x->held;
    r.created_us = to_unix_micros(x->created_at);
    r.acked_us = now_us();
  } else {
    set_error(r, x.error());
  }
  std::printf(
    "A %d %lld %lld %lld %s .\n", static_cast<int>(r.result),
    static_cast<long long>(r.id), static_cast<long long>(r.created_us),
    static_cast<long long>(r.acked_us), pockets_word(r.amounts).c_str());
  std::fflush(stdout);
}

} // namespace

std::vector<std::string> worker_process_command(const std::string& self,
                                                const worker_process_args& a) {
  return {self,
          "--worker-process",
          "--servers=" + a.servers,
          "--chat=" + std::to_string(a.chat),
          "--seed=" + std::to_string(a.seed),
          "--key=" + std::to_string(a.key),
          "--kind=" + a.kind};
}

int worker_process_main(const worker_process_args& a) {
  auto servers = client::parse_endpoints(a.servers);
  if (!servers)
    return 2;
  caf::actor_system_config cfg;
  client::prepare_config(cfg);
  caf::actor_system sys{cfg};
  client::options opts;
  opts.servers = *servers;
  opts.timeout = child_timeout;
  client::client c{sys, opts};
  auto request =
    "chaos-proc-" + std::to_string(a.seed) + "-" + std::to_string(a.key);
  reservation held;
  for (;;) { // until reserved: a previous killed job may still hold the chat
    announce(op::reserve, a.chat, 0, a.key);
    auto x = c.reserve(a.chat, kind{a.kind}, request);
    report(x);
    if (x) {
      held = *x;
      break;
    }
    std::this_thread::sleep_for(child_pace);
  }
  for (auto what = op::start;; what = op::heartbeat) {
    announce(what, a.chat, held.id, a.key);
    report(what == op::start ? c.start(a.chat, held.id)
                             : c.heartbeat(a.chat, held.id));
    std::this_thread::sleep_for(child_pace);
  }
}

std::vector<reservation_id>
collect_worker_output(int fd, uint32_t actor, const kind& k, recorder& rec) {
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) != 0;)
    if (n > 0)
      text.append(buf, static_cast<size_t>(n));
    else if (errno != EINTR)
      break;
  close(fd);
  std::vector<reservation_id> acked;
  std::istringstream in{text};
  op_record current;
  bool open = false;
  auto flush = [&] {
    if (open)
      rec.add(current);
    open = false;
  };
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields{line};
    std::string tag;
    fields >> tag;
    if (tag == "S") {
      flush();
      current = op_record{};
      int what = 0;
      long long chat = 0, id = 0, sent = 0;
      unsigned long long key = 0;
      if (!(fields >> what >> chat >> id >> key >> sent))
        continue; // a line cut by the kill
      current.what = static_cast<op>(what);
      current.chat = chat;
      current.id = id;
      current.key = key;
      current.sent_us = sent;
      current.actor = actor;
      current.job = k;
      open = true;
    } else if (tag == "A" && open) {
      int result = 0;
      long long id = 0, created = 0, acked_at = 0;
      std::string word, end;
      pockets held;
      if (!(fields >> result >> id >> created >> acked_at >> word >> end)
          || end != "." || !read_pockets_word(word, held))
        continue;
      current.result = static_cast<uint8_t>(result);
      current.acked_us = acked_at;
      if (current.ok()) {
        current.id = id;
        current.amounts = held;
        current.created_us = created;
        if (current.what == op::reserve)
          acked.push_back(id);
      }
      flush();
    }
  }
  flush(); // a request without an answer: its outcome is unknown
  return acked;
}

} // namespace chargeonce::chaos
