// SPDX-License-Identifier: Apache-2.0
#include "protocol/validation.hpp"

#include "protocol/errors.hpp"

#include <cstdint>
#include <limits>
#include <string>

namespace chargeonce {

namespace {

constexpr size_t request_id_bytes_max = 256;

/// Valid UTF-8 (no overlong forms, surrogates or code points past
/// U+10FFFF) without NUL: what Postgres text can hold. Anything else would
/// reach the database and come back as an outage instead of bad input.
bool is_storable_text(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c == 0)
      return false;
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : c >= 0xc0 ? 1 : 0;
    if (n == 0 || c > 0xf4 || i + n >= s.size())
      return false;
    uint32_t cp = c & (0x3f >> n);
    for (size_t j = 1; j <= n; ++j) {
      auto d = static_cast<unsigned char>(s[i + j]);
      if ((d & 0xc0) != 0x80)
        return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    static constexpr uint32_t least[] = {0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += n + 1;
  }
  return true;
}

} // namespace

caf::error validate_chat(chat_id chat) {
  if (chat == 0)
    return caf::make_error(ec::invalid_argument, "chat id must not be 0");
  return caf::none;
}

caf::error validate_reservation(chat_id chat, reservation_id id) {
  if (auto err = validate_chat(chat))
    return err;
  if (id <= 0)
    return caf::make_error(ec::invalid_argument,
                           "reservation id must be positive, got "
                             + std::to_string(id));
  return caf::none;
}

caf::error validate_reserve(chat_id chat, const kind& k,
                            const std::string& request_id) {
  if (auto err = validate_chat(chat))
    return err;
  // Whether the catalog has it is the store's to say; a name that no
  // catalog can have is refused here without echoing it.
  if (!is_valid(k))
    return caf::make_error(ec::invalid_argument,
                           "kind must match [a-z][a-z0-9_]{0,31}");
  return validate_request_id(request_id);
}

caf::error validate_kind(const catalog& products, const kind& k) {
  if (products.find_kind(to_string(k)) != nullptr)
    return caf::none;
  return caf::make_error(ec::invalid_argument, "unknown kind " + to_string(k)
                                                 + ": the catalog has "
                                                 + products.kind_names());
}

caf::error validate_pockets(const catalog& products, const pockets& x) {
  for (const auto& item : x.items())
    if (products.find_pocket(item.first) == nullptr)
      return caf::make_error(ec::invalid_argument, "unknown pocket "
                                                     + item.first
                                                     + ": the catalog has "
                                                     + products.pocket_names());
  return caf::none;
}

caf::error validate_request_id(const std::string& request_id) {
  if (request_id.size() > request_id_bytes_max)
    return caf::make_error(ec::invalid_argument,
                           "request_id longer than 256 bytes");
  if (!is_storable_text(request_id))
    return caf::make_error(ec::invalid_argument,
                           "request_id must be UTF-8 without NUL bytes");
  return caf::none;
}

caf::error validate_worker(const std::string& worker) {
  if (worker.size() > request_id_bytes_max)
    return caf::make_error(ec::invalid_argument,
                           "worker longer than 256 bytes");
  if (!is_storable_text(worker))
    return caf::make_error(ec::invalid_argument,
                           "worker must be UTF-8 without NUL bytes");
  return caf::none;
}

bool is_auto_request_id(const std::string& request_id) {
  return request_id.rfind(auto_request_id_prefix, 0) == 0;
}

caf::error validate_cancel(chat_id chat, reservation_id id,
                           const std::string& request_id) {
  if (auto err = validate_chat(chat))
    return err;
  if (id < 0)
    return caf::make_error(ec::invalid_argument,
                           "reservation id must be positive, got "
                             + std::to_string(id));
  if (id != 0 && !request_id.empty())
    return caf::make_error(ec::invalid_argument,
                           "cancel names its job by reservation or by "
                           "request_id, not both");
  return validate_request_id(request_id);
}

caf::error validate_units(int32_t units) {
  if (units < 0 || units > units_max)
    return caf::make_error(ec::invalid_argument,
                           "units must be 1 to " + std::to_string(units_max)
                             + ", not " + std::to_string(units));
  return caf::none;
}

caf::error validate_given_units(int32_t units) {
  if (units == 0)
    return caf::make_error(ec::invalid_argument,
                           "units must be 1 to " + std::to_string(units_max)
                             + ", not 0: leave them out for the whole hold "
                               "(or one unit at reserve); a job that did "
                               "nothing fails");
  return validate_units(units);
}

caf::error validate_job_limit(const caf::optional<int32_t>& limit) {
  if (limit && (*limit < max_active_jobs_min || *limit > max_active_jobs_max))
    return caf::make_error(ec::invalid_argument,
                           "max_active_jobs must be between 1 and 64, got "
                             + std::to_string(*limit));
  return caf::none;
}

caf::error validate_balance_low_threshold(const caf::optional<int32_t>& x) {
  if (x && *x < 0)
    return caf::make_error(ec::invalid_argument,
                           "balance_low_threshold must be 0 (off) or more, "
                           "got "
                             + std::to_string(*x));
  return caf::none;
}

caf::error validate_limits(const limits_update& x) {
  if (!x.set_max_active_jobs && !x.set_balance_low_threshold)
    return caf::make_error(ec::invalid_argument,
                           "set-limits sets max_active_jobs, "
                           "balance_low_threshold or both, not nothing");
  if (x.set_max_active_jobs)
    if (auto err = validate_job_limit(x.max_active_jobs))
      return err;
  if (x.set_balance_low_threshold)
    return validate_balance_low_threshold(x.balance_low_threshold);
  return caf::none;
}

namespace {

/// A payment id as a top-up takes it, and void-grant names it.
caf::error validate_payment_id(const std::string& payment_id) {
  if (payment_id.empty() || payment_id.size() > request_id_bytes_max)
    return caf::make_error(ec::invalid_argument,
                           "payment_id must have 1 to 256 bytes");
  if (!is_storable_text(payment_id))
    return caf::make_error(ec::invalid_argument,
                           "payment_id must be UTF-8 without NUL bytes");
  return caf::none;
}

} // namespace

caf::error validate_top_up(chat_id chat, int64_t credits,
                           const std::string& payment_id) {
  if (auto err = validate_chat(chat))
    return err;
  if (credits <= 0 || credits > std::numeric_limits<int32_t>::max())
    return caf::make_error(ec::invalid_argument,
                           "credits must be between 1 and 2147483647, got "
                             + std::to_string(credits));
  return validate_payment_id(payment_id);
}

caf::error validate_top_up(chat_id chat, int64_t credits,
                           const std::string& payment_id,
                           const grant_terms& terms) {
  if (auto err = validate_top_up(chat, credits, payment_id))
    return err;
  if (terms.priority < grant_priority_min
      || terms.priority > grant_priority_max)
    return caf::make_error(ec::invalid_argument,
                           "priority must be between 0 and 1000, got "
                             + std::to_string(terms.priority));
  if (terms.source != "purchase" && terms.source != "promo"
      && terms.source != "admin")
    return caf::make_error(ec::invalid_argument,
                           "source must be purchase, promo or admin");
  if (terms.expires_at && terms.expires_in_ms != 0)
    return caf::make_error(ec::invalid_argument,
                           "a grant expires at an instant or after a "
                           "duration, not both");
  if (terms.expires_in_ms < 0 || terms.expires_in_ms > grant_expires_in_ms_max)
    return caf::make_error(ec::invalid_argument,
                           "expires_in must be between 1 ms and 100 years, "
                           "got "
                             + std::to_string(terms.expires_in_ms) + " ms");
  return caf::none;
}

caf::error validate_void_grant(chat_id chat, int64_t grant,
                               const std::string& payment_id) {
  if ((grant == 0) == payment_id.empty())
    return caf::make_error(ec::invalid_argument,
                           "void-grant names a grant or a payment_id, one of "
                           "them");
  if (grant < 0)
    return caf::make_error(ec::invalid_argument, "grant must be 1 or more, got "
                                                   + std::to_string(grant));
  if (auto err = validate_chat(chat))
    return err;
  return grant == 0 ? validate_payment_id(payment_id) : caf::none;
}

caf::error validate_uncertain(chat_id chat, reservation_id id,
                              const std::string& provider_ref) {
  if (auto err = validate_reservation(chat, id))
    return err;
  if (provider_ref.empty() || provider_ref.size() > provider_ref_max_bytes)
    return caf::make_error(ec::invalid_argument,
                           "provider_ref must have 1 to 256 bytes");
  if (!is_storable_text(provider_ref))
    return caf::make_error(ec::invalid_argument,
                           "provider_ref must be UTF-8 without NUL bytes");
  return caf::none;
}

caf::error validate_resolve(chat_id chat, reservation_id id,
                            const std::string& outcome, int32_t units) {
  if (auto err = validate_reservation(chat, id))
    return err;
  if (outcome != "succeeded" && outcome != "failed")
    return caf::make_error(ec::invalid_argument,
                           "outcome must be succeeded or failed");
  // Units say what the work cost: a failed job cost nothing.
  if (outcome == "failed" && units != 0)
    return caf::make_error(ec::invalid_argument,
                           "units go with outcome succeeded");
  return validate_units(units);
}

caf::error validate_unresolved(reservation_id after, uint32_t limit) {
  if (after < 0)
    return caf::make_error(ec::invalid_argument,
                           "after must be a reservation id or 0");
  if (limit == 0 || limit > unresolved_page_max)
    return caf::make_error(ec::invalid_argument, "limit must be 1 to 1000");
  return caf::none;
}

caf::error validate_history(chat_id chat, int64_t before, uint32_t limit) {
  if (auto err = validate_chat(chat))
    return err;
  if (before < 0)
    return caf::make_error(ec::invalid_argument,
                           "before must be a ledger id or 0");
  if (limit == 0 || limit > history_page_max)
    return caf::make_error(ec::invalid_argument, "limit must be 1 to 1000");
  return caf::none;
}

caf::error validate_spec(const chat_spec& spec) {
  if (auto err = validate_chat(spec.chat))
    return err;
  // The value may come off the network: as set() builds it, and no more
  // pockets than a catalog can have.
  if (!spec.initial.well_formed()
      || spec.initial.items().size() > catalog_pockets_max)
    return caf::make_error(ec::invalid_argument,
                           "pockets must name each pocket once, at most "
                             + std::to_string(catalog_pockets_max));
  for (const auto& [name, amount] : spec.initial.items()) {
    if (!is_catalog_name(name))
      return caf::make_error(ec::invalid_argument,
                             "pocket name must match [a-z][a-z0-9_]{0,31}");
    if (amount < 0)
      return caf::make_error(ec::invalid_argument,
                             "pocket amounts must not be negative");
  }
  return validate_job_limit(spec.max_active_jobs);
}

} // namespace chargeonce
