// SPDX-License-Identifier: Apache-2.0
// The embedded cluster drives the stock PostgreSQL tools (initdb, pg_ctl,
// pg_isready, psql, createdb) rather than linking server code: that is what
// every Debian machine has, and it keeps the on-disk cluster an ordinary one.
#include "main/server/embedded_cluster.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <grp.h>
#include <pwd.h>
#include <sstream>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utility>
#include <vector>

namespace fs = std::filesystem;

namespace chargeonce {

namespace {

// Only the socket file's name depends on it (no TCP), so a fixed value is
// fine even with several clusters on one machine.
constexpr int port = 5432;
constexpr const char* db_name = "chargeonce";
constexpr const char* superuser = "chargeonce";
// PostgreSQL refuses to run as root; as root we act as this account.
constexpr const char* service_account = "postgres";
// Marks our settings in postgresql.conf so they are appended exactly once.
constexpr const char* conf_marker = "# chargeonce embedded cluster";
constexpr size_t tail_lines = 20;

caf::error fail(std::string what) {
  return caf::make_error(ec::storage_unavailable, std::move(what));
}

/// The identity the PostgreSQL tools run under.
struct identity {
  bool switch_user = false; // true when we are root
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups; // supplementary groups, as initgroups would set
};

caf::expected<identity> pick_identity() {
  identity id;
  if (geteuid() != 0) {
    id.uid = geteuid();
    id.gid = getegid();
    return id;
  }
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  getpwnam_r(service_account, &pw, buf.data(), buf.size(), &found);
  if (found == nullptr)
    return fail("running as root but there is no 'postgres' user to run "
                "PostgreSQL as (install the postgresql package)");
  id.switch_user = true;
  id.uid = pw.pw_uid;
  id.gid = pw.pw_gid;
  int n = 64;
  id.groups.resize(n);
  if (getgrouplist(service_account, id.gid, id.groups.data(), &n) < 0) {
    id.groups.resize(n); // n now holds the required size
    getgrouplist(service_account, id.gid, id.groups.data(), &n);
  }
  id.groups.resize(n);
  return id;
}

/// The bin dir of one installed major version, or "" if it is missing.
std::string bin_dir_of(const std::string& major) {
  auto bin = "/usr/lib/postgresql/" + major + "/bin";
  return access((bin + "/pg_ctl").c_str(), X_OK) == 0 ? bin : std::string{};
}

/// An existing cluster needs the major version that made it (PG_VERSION);
/// otherwise the highest installed one wins, as Debian keeps older majors
/// only for pg_upgrade.
caf::expected<std::string> find_bin_dir(const std::string& data_dir) {
  std::string made_by;
  std::ifstream{data_dir + "/PG_VERSION"} >> made_by;
  if (!made_by.empty() && !bin_dir_of(made_by).empty())
    return bin_dir_of(made_by);
  int best = -1;
  std::error_code err;
  for (const auto& entry : fs::directory_iterator("/usr/lib/postgresql", err)) {
    auto name = entry.path().filename().string();
    auto digit = [](unsigned char c) {
      return std::isdigit(c) != 0;
    };
    if (!name.empty() && std::all_of(name.begin(), name.end(), digit)
        && !bin_dir_of(name).empty())
      best = std::max(best, std::stoi(name));
  }
  if (best < 0)
    return fail("no PostgreSQL binaries under /usr/lib/postgresql/<N>/bin "
                "(install the postgresql package)");
  return bin_dir_of(std::to_string(best));
}

/// The last lines of a file, to put the actual cause into error messages.
std::string tail_of(const std::string& path) {
  std::ifstream in{path};
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(std::move(line));
    if (lines.size() > tail_lines)
      lines.erase(lines.begin());
  }
  std::string out;
  for (const auto& line : lines)
    out += line + '\n';
  return out;
}

/// Quotes a libpq conninfo value when it needs it (spaces, quotes).
std::string conninfo_value(const std::string& x) {
  if (!x.empty() && x.find_first_of(" '\\\t") == std::string::npos)
    return x;
  std::string out = "'";
  for (char c : x) {
    if (c == '\'' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "'";
}

bool can_traverse(const struct stat& st, const identity& id) {
  // POSIX picks exactly one permission class: owner, else group, else other.
  if (st.st_uid == id.uid)
    return (st.st_mode & S_IXUSR) != 0;
  auto in_group = st.st_gid == id.gid
                  || std::find(id.groups.begin(), id.groups.end(), st.st_gid)
                       != id.groups.end();
  if (in_group)
    return (st.st_mode & S_IXGRP) != 0;
  return (st.st_mode & S_IXOTH) != 0;
}

/// Root can enter any directory, the postgres user cannot: a cluster under
/// e.g. /root would fail later with an obscure "Permission denied".
caf::error check_traversable(const fs::path& dir, const identity& id) {
  if (!id.switch_user)
    return {};
  for (auto p = dir; !p.empty(); p = p.parent_path()) {
    struct stat st {};
    if (stat(p.c_str(), &st) == 0 && !can_traverse(st, id))
      return fail("user postgres cannot enter " + p.string()
                  + "; make it traversable (chmod o+x) or put the cluster "
                    "elsewhere");
    if (p == p.root_path())
      break;
  }
  return {};
}

/// What a finished tool left behind.
struct outcome {
  int status = -1; // exit status, or -1 if it did not exit normally
  std::string output;
};

/// Runs the PostgreSQL tools of one cluster and records them in its log.
class toolbox {
public:
  toolbox(identity id, std::string bin, std::string dir)
      : id_(std::move(id)), bin_(std::move(bin)), dir_(std::move(dir)) {}

  std::string data() const { return dir_ + "/data"; }
  std::string socket() const { return dir_ + "/socket"; }
  std::string log() const { return dir_ + "/postgres.log"; }
  const identity& who() const { return id_; }
  const std::string& bin() const { return bin_; }

  /// Runs `tool` from the bin dir with `args`; stdout and stderr are
  /// captured, appended to the log and returned.
  caf::expected<outcome> run(const std::string& tool,
                             std::vector<std::string> args) const {
    args.insert(args.begin(), bin_ + "/" + tool);
    auto result = spawn(args);
    if (result)
      append_log(args, *result);
    return result;
  }

  /// Like run, but any failure becomes an error that carries the log tail.
  caf::error check(const std::string& what, const std::string& tool,
                   std::vector<std::string> args) const {
    auto result = run(tool, std::move(args));
    if (!result)
      return result.error();
    if (result->status != 0)
      return fail(what + " failed (exit " + std::to_string(result->status)
                  + "); tail of " + log() + ":\n" + tail_of(log()));
    return {};
  }

private:
  caf::expected<outcome> spawn(const std::vector<std::string>& args) const;
  void append_log(const std::vector<std::string>& args,
                  const outcome& result) const;

  identity id_;
  std::string bin_;
  std::string dir_;
};

/// fork + execve, not system(): no shell parses our paths, and the child can
/// drop root before it runs anything. After fork only async-signal-safe calls
/// are allowed (CAF and spdlog threads may hold locks), so everything the
/// child needs is prepared here first.
caf::expected<outcome>
toolbox::spawn(const std::vector<std::string>& args) const {
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (const auto& arg : args)
    argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  // A fixed environment: the caller's PG* variables must not redirect our
  // tools, and LC_ALL=C keeps their messages in English for the log.
  char env_path[] = "PATH=/usr/bin:/bin";
  char env_locale[] = "LC_ALL=C";
  char* envp[] = {env_path, env_locale, nullptr};
  static const char chdir_failed[] = "cannot enter the cluster directory\n";
  static const char setuid_failed[] = "cannot switch to user postgres\n";
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    return fail(std::string{"pipe: "} + std::strerror(errno));
  int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  auto max_fd = sysconf(_SC_OPEN_MAX); // fallback if close_range is missing
  auto pid = fork();
  if (pid == 0) {
    dup2(null_fd, STDIN_FILENO);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    // The postmaster outlives us: it must not inherit our sockets (a listen
    // port would stay bound after the service exits).
    if (close_range(3, ~0U, 0) != 0)
      for (long fd = 3; fd < max_fd; ++fd)
        close(static_cast<int>(fd));
    if (id_.switch_user
        && (setgroups(id_.groups.size(), id_.groups.data()) != 0
            || setgid(id_.gid) != 0 || setuid(id_.uid) != 0)) {
      [[maybe_unused]] auto n =
        write(2, setuid_failed, sizeof setuid_failed - 1);
      _exit(126);
    }
    // A cwd the postgres user can read: initdb and psql complain otherwise.
    if (chdir(dir_.c_str()) != 0) {
      [[maybe_unused]] auto n = write(2, chdir_failed, sizeof chdir_failed - 1);
      _exit(126);
    }
    execve(argv[0], argv.data(), envp);
    _exit(127);
  }
  close(fds[1]);
  if (null_fd >= 0)
    close(null_fd);
  if (pid < 0) {
    close(fds[0]);
    return fail(std::string{"fork: "} + std::strerror(errno));
  }
  outcome result;
  char buf[4096];
  for (;;) {
    auto n = read(fds[0], buf, sizeof buf);
    if (n > 0)
      result.output.append(buf, static_cast<size_t>(n));
    else if (n == 0 || errno != EINTR)
      break;
  }
  close(fds[0]);
  // A failed waitpid (e.g. SIGCHLD ignored by the host) must not read as
  // success.
  int status = 0;
  pid_t done = 0;
  while ((done = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  result.status = done == pid && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

void toolbox::append_log(const std::vector<std::string>& args,
                         const outcome& result) const {
  std::ofstream out{log(), std::ios::app};
  out << "$";
  for (const auto& arg : args)
    out << ' ' << arg;
  out << "  # exit " << result.status << '\n' << result.output;
  if (!result.output.empty() && result.output.back() != '\n')
    out << '\n';
}

/// `bin` pins the binaries used at start, so stop() uses the same ones.
caf::expected<toolbox> make_toolbox(const std::string& dir, std::string bin) {
  auto id = pick_identity();
  if (!id)
    return id.error();
  if (bin.empty()) {
    auto found = find_bin_dir(dir + "/data");
    if (!found)
      return found.error();
    bin = std::move(*found);
  }
  return toolbox{std::move(*id), std::move(bin), dir};
}

/// Hands a path we created to the postgres user when we are root.
caf::error give_away(const std::string& path, const identity& id) {
  if (id.switch_user && chown(path.c_str(), id.uid, id.gid) != 0)
    return fail("chown " + path + ": " + std::strerror(errno));
  return {};
}

/// Creates <dir>, <dir>/socket and the log, owned by whoever runs the server.
caf::error prepare_layout(const toolbox& tb) {
  std::error_code err;
  fs::create_directories(tb.socket(), err);
  if (err)
    return fail("cannot create " + tb.socket() + ": " + err.message());
  // Local connections are trusted, so only the owner may reach the socket.
  fs::permissions(tb.socket(), fs::perms::owner_all, err);
  // Created here so it can be handed to postgres: pg_ctl -l opens it as them.
  if (!std::ofstream{tb.log(), std::ios::app})
    return fail("cannot create " + tb.log());
  for (const auto& path :
       {fs::path{tb.socket()}.parent_path().string(), tb.socket(), tb.log()})
    if (auto e = give_away(path, tb.who()))
      return e;
  return check_traversable(fs::path{tb.socket()}.parent_path(), tb.who());
}

/// The client connects via the absolute path, which must fit sun_path.
caf::error check_socket_path(const toolbox& tb) {
  auto file = tb.socket() + "/.s.PGSQL." + std::to_string(port);
  if (file.size() >= sizeof(sockaddr_un::sun_path))
    return fail("socket path too long for a Unix socket (" + file
                + "); use a shorter cluster directory");
  return {};
}

bool initialized(const toolbox& tb) {
  return fs::exists(tb.data() + "/PG_VERSION");
}

caf::error init_cluster(const toolbox& tb) {
  spdlog::info("embedded postgres: initdb dir={}", tb.data());
  // --locale=C: sorting must not depend on the host's locales; UTF8 works
  // with it. Host connections are rejected: there is no TCP listener anyway.
  return tb.check("initdb", "initdb",
                  {"-D", tb.data(), "-U", superuser, "-E", "UTF8", "--locale=C",
                   "--auth-local=trust", "--auth-host=reject"});
}

/// Appends our settings once; checked on every start so a crash between
/// initdb and this step cannot leave a cluster listening on TCP.
caf::error ensure_config(const toolbox& tb) {
  auto conf = tb.data() + "/postgresql.conf";
  std::ifstream in{conf};
  std::stringstream text;
  text << in.rdbuf();
  if (text.str().find(conf_marker) != std::string::npos)
    return {};
  std::ofstream out{conf, std::ios::app};
  out << '\n'
      << conf_marker << ": Unix socket only, no TCP.\n"
      << "listen_addresses = ''\n"
      << "port = " << port << '\n'
      << "# Relative to the data directory: the cluster can be moved.\n"
      << "unix_socket_directories = '../socket'\n";
  if (!out)
    return fail("cannot write " + conf);
  return {};
}

/// pg_ctl status: exit 0 means a live postmaster owns the data dir. A stale
/// postmaster.pid (killed server) reads as "not running", and the server
/// itself discards such a file on start.
bool running(const toolbox& tb) {
  auto result = tb.run("pg_ctl", {"status", "-D", tb.data()});
  return result && result->status == 0;
}

caf::error start_server(const toolbox& tb) {
  return tb.check("pg_ctl start", "pg_ctl",
                  {"start", "-w", "-t", "60", "-D", tb.data(), "-l", tb.log()});
}

std::vector<std::string> client_args(const toolbox& tb) {
  return {"-h", tb.socket(), "-p", std::to_string(port), "-U", superuser};
}

/// A server someone else started may still be in recovery; pg_ctl -w already
/// covers the servers we start ourselves.
caf::error wait_ready(const toolbox& tb) {
  auto args = client_args(tb);
  args.insert(args.end(), {"-d", "postgres", "-t", "30"});
  return tb.check("pg_isready (the server in postmaster.pid does not answer)",
                  "pg_isready", std::move(args));
}

caf::error ensure_database(const toolbox& tb) {
  auto args = client_args(tb);
  args.insert(args.end(),
              {"-X", "-q", "-t", "-A", "-d", "postgres", "-c",
               std::string{"SELECT 1 FROM pg_database WHERE datname = '"}
                 + db_name + "'"});
  auto result = tb.run("psql", args);
  if (!result)
    return result.error();
  if (result->status != 0)
    return fail("psql failed (exit " + std::to_string(result->status)
                + "); tail of " + tb.log() + ":\n" + tail_of(tb.log()));
  if (result->output.find('1') != std::string::npos)
    return {};
  spdlog::info("embedded postgres: creating database {}", db_name);
  auto create = client_args(tb);
  create.push_back(db_name);
  return tb.check("createdb", "createdb", std::move(create));
}

std::string dsn(const toolbox& tb) {
  return "host=" + conninfo_value(tb.socket()) + " port=" + std::to_string(port)
         + " dbname=" + db_name + " user=" + superuser + " connect_timeout=5";
}

} // namespace

embedded_cluster::embedded_cluster(std::string dir) {
  // lexically_normal + no trailing slash: the socket path is built from it.
  auto path = fs::absolute(fs::path{std::move(dir)}).lexically_normal();
  if (!path.has_filename() && path.has_parent_path())
    path = path.parent_path();
  dir_ = path.string();
}

embedded_cluster::~embedded_cluster() {
  try {
    stop();
  } catch (...) {
    // A destructor must not throw; stop() already logged what it could.
  }
  if (owner_lock_ >= 0)
    close(owner_lock_);
}

namespace {

/// Takes `<dir>/owner.lock` if no live process holds it; -1 otherwise. The
/// lock, not the process that ran pg_ctl start, says who stops the cluster:
/// the kernel drops it when its holder dies, however it dies. Close-on-exec,
/// so Postgres (started from here) never inherits it.
int try_own(const std::string& dir) {
  auto path = dir + "/owner.lock";
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0)
    return -1;
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

} // namespace

caf::expected<std::string> embedded_cluster::start() {
  auto tb = make_toolbox(dir_, {});
  if (!tb)
    return tb.error();
  bin_dir_ = tb->bin();
  for (auto step : {check_socket_path, prepare_layout})
    if (auto err = step(*tb))
      return err;
  if (!initialized(*tb))
    if (auto err = init_cluster(*tb))
      return err;
  if (auto err = ensure_config(*tb))
    return err;
  if (owner_lock_ < 0)
    owner_lock_ = try_own(dir_);
  if (running(*tb)) {
    // Ours to stop on exit unless a live server owns it: then it is theirs.
    started_ = owner_lock_ >= 0;
    spdlog::info("embedded postgres already running, {} dir={}",
                 started_ ? "adopting it (stopped with this server)"
                          : "reusing it (another server owns it)",
                 dir_);
    if (auto err = wait_ready(*tb))
      return err;
  } else {
    if (auto err = start_server(*tb))
      return err;
    started_ = true;
    spdlog::info("embedded postgres started dir={} socket={}", dir_,
                 tb->socket());
  }
  if (auto err = ensure_database(*tb))
    return err;
  return dsn(*tb);
}

void embedded_cluster::stop() {
  if (!started_)
    return;
  started_ = false; // idempotent even if pg_ctl fails below
  auto tb = make_toolbox(dir_, bin_dir_);
  if (!tb) {
    spdlog::warn("embedded postgres: cannot stop: {}",
                 error_message(tb.error()));
    return;
  }
  if (auto err = tb->check("pg_ctl stop", "pg_ctl",
                           {"stop", "-w", "-m", "fast", "-D", tb->data()}))
    spdlog::warn("embedded postgres: {}", error_message(err));
  else
    spdlog::info("embedded postgres stopped dir={}", dir_);
}

} // namespace chargeonce
