// SPDX-License-Identifier: Apache-2.0
#include "persistence/failure.hpp"

#include <pqxx/except>

#include <cstdlib>
#include <cxxabi.h>
#include <memory>
#include <typeinfo>

namespace chargeonce::persistence {

std::string one_line(std::string text) {
  for (auto& c : text)
    if (c == '\n' || c == '\t' || c == '\r')
      c = ' ';
  while (!text.empty() && text.back() == ' ')
    text.pop_back();
  return text;
}

namespace {

/// "std::out_of_range" rather than "St12out_of_range".
std::string type_name(const std::type_info& t) {
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> name{
    abi::__cxa_demangle(t.name(), nullptr, nullptr, &status), &std::free};
  return status == 0 && name ? std::string{name.get()} : t.name();
}

failure outage(std::string sqlstate, bool refused, const std::exception& e) {
  return {ec::storage_unavailable, std::move(sqlstate), refused,
          one_line(e.what())};
}

/// SQLSTATE class 42 (syntax error or access rule violation) but for a
/// missing privilege: a statement that names a column, function or type
/// the schema does not have, or does not parse. Retrying cannot help; it
/// is a bug (or a database the server's migrations do not describe), never
/// an outage. 42501 (insufficient privilege) is the operator's grant.
bool our_sql_is_wrong(const std::string& sqlstate) {
  return sqlstate.size() == 5 && sqlstate.compare(0, 2, "42") == 0
         && sqlstate != "42501";
}

} // namespace

bool lost_primary(const failure& f) {
  if (f.code != ec::storage_unavailable)
    return false;
  const auto& s = f.sqlstate;
  return s.empty() || s.compare(0, 2, "08") == 0 || s == "57P01" || s == "57P02"
         || s == "57P03" || s == "25006";
}

failure classify(const std::exception_ptr& ep) {
  try {
    std::rethrow_exception(ep);
  } catch (const pqxx::sql_error& e) {
    if (our_sql_is_wrong(e.sqlstate()))
      return {ec::internal, e.sqlstate(), true, one_line(e.what())};
    return outage(e.sqlstate(), true, e);
  } catch (const pqxx::deadlock_detected& e) {
    // libpqxx 6.4 throws these for SQLSTATE class 40 instead of an
    // sql_error, and without the SQLSTATE: put it back.
    return outage("40P01", true, e);
  } catch (const pqxx::serialization_failure& e) {
    return outage("40001", true, e);
  } catch (const pqxx::statement_completion_unknown& e) {
    return outage("40003", false, e); // it may have committed
  } catch (const pqxx::transaction_rollback& e) {
    return outage("40000", false, e);
  } catch (const not_primary& e) {
    return outage("25006", true, e);
  } catch (const pqxx::failure& e) {
    // broken_connection, in_doubt_error and whatever else libpqxx reports
    // about the server or the connection: the outcome is unknown.
    return outage({}, false, e);
  } catch (const std::exception& e) {
    return {ec::internal,
            {},
            false,
            type_name(typeid(e)) + ": " + one_line(e.what())};
  } catch (...) {
    return {ec::internal, {}, false, "an exception of unknown type"};
  }
}

} // namespace chargeonce::persistence
