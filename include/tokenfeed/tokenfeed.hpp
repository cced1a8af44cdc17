// The whole public API in one include: the loader and its batches, the config, the chat
// template, tokenizers, the dataset writer, errors, logging and the version.
#pragma once

#include "tokenfeed/batch.hpp"
#include "tokenfeed/chat_format.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/dataset_writer.hpp"
#include "tokenfeed/dtype.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"
#include "tokenfeed/log.hpp"
#include "tokenfeed/rl.hpp"
#include "tokenfeed/special_tokens.hpp"
#include "tokenfeed/tokenizer.hpp"
#include "tokenfeed/version.hpp"
