// SPDX-License-Identifier: Apache-2.0
#include "tools/bench/drivers.hpp"

#include "client/client.hpp"
#include "protocol/errors.hpp"
#include "tools/bench/baseline.hpp"
#include "tools/bench/options.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

namespace chargeonce::bench {

namespace {

caf::expected<reservation_id> id_of(const caf::expected<reservation>& x) {
  if (!x)
    return x.error();
  return x->id;
}

/// Any API with the client library's blocking calls: the client library
/// itself, or the baseline (the same names, one transaction each).
template <class Api>
class api_driver : public driver {
public:
  explicit api_driver(Api& api) : api_(api) {}
  caf::expected<reservation_id> reserve(chat_id chat) override {
    return id_of(api_.reserve(chat, kind::image, {}));
  }
  caf::error start(chat_id chat, reservation_id id) override {
    return error_of(api_.start(chat, id));
  }
  caf::error commit(chat_id chat, reservation_id id) override {
    return error_of(api_.commit(chat, id));
  }
  caf::error fail(chat_id chat, reservation_id id) override {
    return error_of(api_.fail(chat, id));
  }
  caf::error cancel(chat_id chat) override {
    return error_of(api_.cancel(chat));
  }

protected:
  Api& api_;
};

class in_process_driver : public driver {
public:
  in_process_driver(caf::actor_system& sys, api_actor api)
      : self_(sys), api_(std::move(api)) {}
  caf::expected<reservation_id> reserve(chat_id chat) override {
    return id_of(
      ask<reservation>(atom::reserve_v, chat, kind::image, std::string{}));
  }
  caf::error start(chat_id chat, reservation_id id) override {
    return error_of(ask<reservation>(atom::start_v, chat, id));
  }
  caf::error commit(chat_id chat, reservation_id id) override {
    return error_of(ask<receipt>(atom::commit_v, chat, id));
  }
  caf::error fail(chat_id chat, reservation_id id) override {
    return error_of(ask<reservation>(atom::fail_v, chat, id));
  }
  caf::error cancel(chat_id chat) override {
    return error_of(ask<reservation>(atom::cancel_v, chat));
  }

private:
  template <class T, class... Ts>
  caf::expected<T> ask(const Ts&... xs) {
    caf::expected<T> out{caf::sec::none};
    self_->request(api_, request_timeout, xs...)
      .receive([&](T& x) { out = std::move(x); },
               [&](caf::error& err) { out = std::move(err); });
    return out;
  }

  caf::scoped_actor self_;
  api_actor api_;
};

/// Owns the baseline's connection; a base of its own so that it is built
/// before the api_driver that refers to it.
struct baseline_owner {
  explicit baseline_owner(const std::string& dsn) : db(dsn) {}
  baseline_store db;
};

class baseline_driver : private baseline_owner,
                        public api_driver<baseline_store> {
public:
  explicit baseline_driver(const std::string& dsn)
      : baseline_owner(dsn), api_driver(db) {}
  void connect(chat_id) override {
    if (auto err = db.connect())
      spdlog::error("baseline cannot connect: {}", error_message(err));
  }
};

struct remote_config : caf::actor_system_config {
  remote_config() { client::prepare_config(*this); }
};

} // namespace

remote_session::remote_session(const std::vector<client::endpoint>& servers)
    : cfg_(std::make_unique<remote_config>()),
      sys_(std::make_unique<caf::actor_system>(*cfg_)) {
  client::options opts;
  opts.servers = servers;
  opts.timeout = request_timeout;
  api_ = std::make_unique<client::client>(*sys_, opts);
}

// The client goes before the system it runs on, the system before its
// config.
remote_session::~remote_session() {
  api_.reset();
  sys_.reset();
}

std::unique_ptr<driver> make_remote_driver(client::client& api) {
  return std::make_unique<api_driver<client::client>>(api);
}

std::unique_ptr<driver> make_in_process_driver(caf::actor_system& sys,
                                               api_actor api) {
  return std::make_unique<in_process_driver>(sys, std::move(api));
}

std::unique_ptr<driver> make_baseline_driver(const std::string& dsn) {
  return std::make_unique<baseline_driver>(dsn);
}

} // namespace chargeonce::bench
