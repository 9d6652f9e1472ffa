// TensorBoard summaries: one `Summary` protocol buffer being built, with the
// value kinds lockstep writes (scalars, markdown text, the HParams plugin's
// records in hparams.h). Field numbers follow TensorFlow's summary.proto and
// tensor.proto; the bytes are encoded by hand (src/summary/wire.h), so
// nothing here links protobuf.
//
// A Summary is a plain value: build it on one thread, then hand it to an
// EventWriter (event_writer.h).
#pragma once

#include <string>
#include <string_view>

namespace lockstep::summary {

class Summary {
 public:
  // A scalar for TensorBoard's Scalars tab (Summary.Value.simple_value, a
  // 32-bit float as TensorFlow stores it).
  Summary& scalar(std::string_view tag, double value);
  // Markdown for the Text tab: a DT_STRING scalar tensor, plugin "text".
  Summary& text(std::string_view tag, std::string_view markdown);
  // A value carrying `content` for plugin `plugin` (a scalar float tensor 0
  // as TensorBoard's own plugin summaries do, data class "tensor").
  Summary& plugin_value(std::string_view tag, std::string_view plugin, std::string_view content);

  bool empty() const { return bytes_.empty(); }
  int values() const { return values_; }
  // The serialized Summary message.
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
  int values_ = 0;
};

}  // namespace lockstep::summary
