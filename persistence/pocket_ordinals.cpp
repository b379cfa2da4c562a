// SPDX-License-Identifier: Apache-2.0
#include "persistence/pocket_ordinals.hpp"

#include "persistence/failure.hpp"
#include "protocol/pockets.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cstring>

namespace chargeonce::persistence {

namespace {

/// A PostgreSQL text[] literal of names (catalog names need no quoting).
std::string name_array(const std::vector<std::string>& names) {
  std::string out = "{";
  for (const auto& name : names)
    out += (out.size() == 1 ? "" : ",") + name;
  return out + "}";
}

} // namespace

pocket_ordinals::pocket_ordinals(std::string dsn) : dsn_(std::move(dsn)) {
  // nop
}

pocket_ordinals pocket_ordinals::builtin() {
  pocket_ordinals out;
  for (const auto* name :
       {pocket::daily_messages, pocket::daily_images, pocket::balance}) {
    out.names_.emplace_back(name);
    out.ordinals_[name] = static_cast<int>(out.names_.size());
  }
  return out;
}

void pocket_ordinals::load(pqxx::transaction_base& tx) {
  // Read whole before anything is replaced: a lookup that fails halfway
  // must leave the ordinals known so far as they were.
  auto rs = tx.exec("SELECT pocket, ordinal FROM catalog_pockets");
  std::vector<std::string> names;
  std::map<std::string, int, std::less<>> ordinals;
  for (const auto& r : rs) {
    auto name = r[0].as<std::string>();
    auto ordinal = r[1].as<int>();
    if (names.size() < static_cast<size_t>(ordinal))
      names.resize(ordinal);
    names[ordinal - 1] = name;
    ordinals[name] = ordinal;
  }
  names_ = std::move(names);
  ordinals_ = std::move(ordinals);
}

void pocket_ordinals::register_catalog(pqxx::connection_base& conn,
                                       const catalog& products) {
  auto missing = [&] {
    std::vector<std::string> out;
    for (const auto& p : products.pockets)
      if (ordinals_.count(p.name) == 0)
        out.push_back(p.name);
    // By name: the same ordinals whatever order the catalog lists them in.
    std::sort(out.begin(), out.end());
    return out;
  };
  {
    pqxx::read_transaction tx{conn};
    load(tx);
  }
  if (missing().empty())
    return;
  pqxx::work tx{conn};
  tx.exec("LOCK TABLE catalog_pockets IN EXCLUSIVE MODE");
  load(tx);
  auto names = name_array(missing());
  tx.exec_params("INSERT INTO catalog_pockets (pocket, ordinal)"
                 " SELECT p, coalesce((SELECT max(ordinal)"
                 "                       FROM catalog_pockets), 0) + n"
                 "   FROM unnest($1::text[]) WITH ORDINALITY AS u(p, n)",
                 names);
  load(tx);
  tx.commit();
  spdlog::info("catalog registered pockets={}", names);
}

int pocket_ordinals::ordinal(const std::string& name) const {
  auto i = ordinals_.find(name);
  if (i == ordinals_.end())
    throw broken_invariant("pocket " + name
                           + " has no ordinal: it is not in catalog_pockets");
  return i->second;
}

const std::string& pocket_ordinals::name(int ordinal) {
  auto known = [&] {
    return ordinal >= 1 && static_cast<size_t>(ordinal) <= names_.size()
           && !names_[ordinal - 1].empty();
  };
  if (!known() && !dsn_.empty()) {
    auto now = std::chrono::steady_clock::now();
    if (lookup_failure_ && now < next_lookup_)
      std::rethrow_exception(lookup_failure_);
    try {
      pqxx::connection conn{dsn_};
      pqxx::read_transaction tx{conn};
      load(tx);
      lookup_failure_ = nullptr;
    } catch (...) {
      lookup_failure_ = std::current_exception();
      next_lookup_ = now + std::chrono::seconds{1};
      throw;
    }
  }
  if (!known())
    throw broken_invariant("pocket ordinal " + std::to_string(ordinal)
                           + " is not in catalog_pockets");
  return names_[ordinal - 1];
}

pockets pocket_ordinals::read(const char* text) {
  // One dimension from 1, as chats_pockets and the functions keep them:
  // "{}", "{NULL,1}", "{3,0,-2}".
  auto size = std::strlen(text);
  if (size < 2 || text[0] != '{' || text[size - 1] != '}')
    throw broken_invariant(std::string{"not a pocket array: "} + text);
  pockets out;
  const char* at = text + 1;
  const char* end = text + size - 1;
  for (int ordinal = 1; at < end; ++ordinal) {
    const char* comma = std::find(at, end, ',');
    if (std::string_view{at, static_cast<size_t>(comma - at)} != "NULL") {
      int32_t amount = 0;
      auto [stop, err] = std::from_chars(at, comma, amount);
      if (err != std::errc{} || stop != comma)
        throw broken_invariant(std::string{"not a pocket array: "} + text);
      out.set(name(ordinal), amount);
    }
    at = comma == end ? end : comma + 1;
  }
  return out;
}

pockets pocket_ordinals::read(const nlohmann::json& array) {
  pockets out;
  int ordinal = 0;
  for (const auto& amount : array.get_ref<const nlohmann::json::array_t&>()) {
    ++ordinal;
    if (!amount.is_null())
      out.set(name(ordinal), amount.get<int32_t>());
  }
  return out;
}

std::string pocket_ordinals::text(const pockets& x) const {
  std::vector<const pockets::value_type*> by_ordinal;
  for (const auto& item : x.items()) {
    auto i = static_cast<size_t>(ordinal(item.first));
    if (by_ordinal.size() < i)
      by_ordinal.resize(i, nullptr);
    by_ordinal[i - 1] = &item;
  }
  std::string out = "{";
  for (const auto* item : by_ordinal) {
    if (out.size() > 1)
      out += ',';
    out += item ? std::to_string(item->second) : "NULL";
  }
  return out + "}";
}

std::string catalog_text(const catalog& products,
                         const pocket_ordinals& ordinals) {
  auto out = nlohmann::json::object();
  for (const auto& k : products.kinds) {
    auto pay = nlohmann::json::array();
    for (const auto& source : k.pay_from)
      pay.push_back({ordinals.ordinal(source.pocket), source.price});
    out[k.name] = {{"pay", std::move(pay)},
                   {"free", k.premium_free},
                   {"q", k.queue},
                   {"pq", k.priority_queue},
                   {"cancel", to_string(k.cancel_after_start)},
                   {"refusal", to_string(insufficient_for(kind{k.name}))},
                   {"why", cannot_pay_detail(k)}};
  }
  return out.dump();
}

} // namespace chargeonce::persistence
