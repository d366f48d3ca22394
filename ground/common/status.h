// One status type for the whole project, plus Result<T> and the propagation macros.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace karma {

enum class Code {
  kOk = 0,
  kInvalidArgument,  // bad user input: a value, a flag, a file's contents
  kNotFound,
  kIoError,
  kCorrupt,          // a file fails its checks (CRC, bounds, references)
  kUnsupported,      // a newer format version, an unknown kind
  kInfeasible,       // a plan cannot meet its constraints
  kResourceExhausted,
  kInternal,
};

const char* CodeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return {}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

  // Prefixes context to the message, e.g. the file name an error came from.
  Status WithContext(const std::string& context) const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
inline Status IoError(std::string m) { return {Code::kIoError, std::move(m)}; }
inline Status Corrupt(std::string m) { return {Code::kCorrupt, std::move(m)}; }
inline Status Unsupported(std::string m) { return {Code::kUnsupported, std::move(m)}; }
inline Status Infeasible(std::string m) { return {Code::kInfeasible, std::move(m)}; }
inline Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }

// A value or the Status explaining why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}           // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}    // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace karma

#define KARMA_CONCAT_INNER(a, b) a##b
#define KARMA_CONCAT(a, b) KARMA_CONCAT_INNER(a, b)

// Returns the Status of `expr` from the enclosing function when it is not OK.
#define KARMA_RETURN_IF_ERROR(expr)                 \
  do {                                              \
    ::karma::Status karma_status_ = (expr);         \
    if (!karma_status_.ok()) return karma_status_;  \
  } while (0)

// `KARMA_ASSIGN_OR_RETURN(auto x, F())` declares x from a Result or returns its Status.
#define KARMA_ASSIGN_OR_RETURN(lhs, expr) \
  KARMA_ASSIGN_OR_RETURN_IMPL(KARMA_CONCAT(karma_result_, __LINE__), lhs, expr)
#define KARMA_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
