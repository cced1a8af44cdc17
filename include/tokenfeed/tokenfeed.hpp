// The whole public API in one include: the loader and its batches, the config, resume state
// files, the audit log's reader, the chat template, tokenizers, the dataset writer,
// preparation (conversations and raw text), .npy output, errors, logging and the version.
#pragma once

#include "tokenfeed/audit.hpp"
#include "tokenfeed/batch.hpp"
#include "tokenfeed/chat_format.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/dataset_writer.hpp"
#include "tokenfeed/dtype.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"
#include "tokenfeed/log.hpp"
#include "tokenfeed/npy_writer.hpp"
#include "tokenfeed/prepare.hpp"
#include "tokenfeed/prepare_text.hpp"
#include "tokenfeed/rl.hpp"
#include "tokenfeed/special_tokens.hpp"
#include "tokenfeed/state_file.hpp"
#include "tokenfeed/tokenizer.hpp"
#include "tokenfeed/version.hpp"
